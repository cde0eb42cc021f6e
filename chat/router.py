"""Which way a question goes: general knowledge (no retrieval, no embedding, no debit), a
lookup in the account's documents, or a summary of one named document. When unsure,
retrieve."""
from __future__ import annotations

import re
from dataclasses import dataclass

GENERAL, LOOKUP, SUMMARY = "general", "lookup", "summary"

_SUMMARY = re.compile(r"^\s*(?:please\s+)?(?:summari[sz]e|give (?:me )?a summary of|tl;?dr(?: of)?|sum up)\s+"
                      r"(?:the\s+)?(?P<target>.+?)\s*[?.!]*\s*$", re.I)
# Words that point at the team's own material: these questions always retrieve.
_OWN = re.compile(r"\b(my|our|ours|we|us|mine|team'?s|company'?s|according to|attached|uploaded|"
                  r"(?:in|from|of) (?:the|this|that) (?:report|document|doc|file|pdf|handbook|policy|manual|"
                  r"contract|notes?|spreadsheet|presentation|memo|guide|minutes|agenda|plan|proposal))\b", re.I)
# Textbook-style questions with nothing that points at the account's documents.
_GENERAL = re.compile(r"^\s*(?:what\s+(?:is|are)\s+(?:an?|the)?\s*\w[\w\s-]{0,40}\??$|define\s+\w|"
                      r"explain\s+(?:what|how)\s+(?:an?\s+)?\w[\w\s-]{0,40}(?:is|are|works?)\??$|"
                      r"how\s+(?:does|do)\s+(?:an?\s+)?\w[\w\s-]{0,30}\s+work\??$|"
                      r"(?:hi|hello|hey|thanks|thank you)\b)", re.I)


@dataclass(frozen=True)
class Route:
    kind: str
    summary_target: str = ""


def route(question: str, *, document_names: list[str]) -> Route:
    text = question.strip()
    summary = _SUMMARY.match(text)
    if summary:
        return Route(SUMMARY, summary.group("target"))
    lowered = text.lower()
    if _OWN.search(text) or _mentions_document(lowered, document_names):
        return Route(LOOKUP)
    if _GENERAL.match(text):
        return Route(GENERAL)
    return Route(LOOKUP)


def _mentions_document(lowered: str, names: list[str]) -> bool:
    for name in names:
        stem = name.lower().rsplit(".", 1)[0].replace("_", " ").replace("-", " ").strip()
        if len(stem) >= 4 and (stem in lowered.replace("_", " ").replace("-", " ") or name.lower() in lowered):
            return True
    return False


def match_document(target: str, documents: list) -> object | None:
    """The document a summary asks for: exact name, then name without extension, then a
    name or title containing the target (the shortest such name wins)."""
    wanted = target.strip().strip("\"'“”").lower()
    if not wanted:
        return None
    def stem(d):
        return d.name.lower().rsplit(".", 1)[0]
    for test in (lambda d: d.name.lower() == wanted, lambda d: stem(d) == wanted,
                 lambda d: wanted in d.name.lower() or wanted in (d.title or "").lower(),
                 lambda d: stem(d) in wanted):
        found = sorted((d for d in documents if test(d)), key=lambda d: len(d.name))
        if found:
            return found[0]
    return None
