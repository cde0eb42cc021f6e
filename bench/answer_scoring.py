"""How answer_eval judges one answer: pure functions of text, no database, no model
(bench/tests/test_answer_scoring.py).

- `passage_holds`: a passage is a right one (the question's expected document, and one of its
  distinctive substrings, or for the Python FAQ a shared 60-character span of the answer section);
- `degenerate_kind`: loops, cut at the token cap, table-of-contents / index dumps, list dumps,
  raw `|` pipes (a table that is not a Markdown table);
- `wrong_script` / `invented_facts` (together: garbage): letters of a script the question's
  language does not use, and numbers or capitalised names found in no passage and not in the
  question (nor in the answer a general-knowledge question accepts);
- `abstains` / `abstained_correctly`: says the documents do not cover it, and adds no answer of
  its own (what follows is the passages' text or nothing).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

SPAN = 60
CITATION = re.compile(r"\[(?:Document|Doc)\s*\d+\]", re.I)
ABSTAIN = re.compile(
    r"(documents?|chunks?|sources?|passages?|provided (?:text|context)|context)\s+(?:\S+\s+){0,3}?"
    r"(?:do(?:es)?\s*n[o'’]t|did\s*n[o'’]t|don[’']t|doesn[’']t|do not|does not)\s+(?:\S+\s+)?(?:say|cover|mention|contain|"
    r"include|address|answer|specify|provide|discuss)|not\s+(?:covered|mentioned|found|addressed|answered)\s+(?:in|by)\s+"
    r"(?:the|your)|no information|could\s*n[o'’]t find|could not find|can(?:no|'|’)t find|not in the (?:team'?s )?documents",
    re.I,
)
STOPWORDS = set(
    """a an the and or but if then else of to in on at by for with from as is are was were be been
being it its this that these those there here which who whom whose what when where why how do does did done not
no yes can could should would will shall may might must you your yours we our ours they their them he she his her
i me my mine so such than too very just also only into out up down over under about above below again further
once all any both each few more most other some same own nor document documents chunk chunks""".split()
)
# Capitalised words that are not names (sentence openers are skipped anyway).
COMMON_CAPITALS = set(
    """I I'm I've I'd I'll The A An This That These Those It Its You Your Yes No Hi Hello Hey Thanks
Thank Sorry Please OK Ok Okay Document Documents Note Answer Sources Source Question Here There If When Where What
Why How Who Which Also However For In On At To And Or But Not Step See Use Type Run Then""".split()
)
LATIN_LANGUAGES = {"en", "de", "fr", "es", "it", "nl", "pt", "pl", "sv", "da", "no", "fi"}
SCRIPT_OF_LANGUAGE = {
    "ru": "CYRILLIC",
    "uk": "CYRILLIC",
    "el": "GREEK",
    "ar": "ARABIC",
    "fa": "ARABIC",
    "he": "HEBREW",
    "zh": "CJK",
    "ja": "CJK",
    "ko": "HANGUL",
    "hi": "DEVANAGARI",
}


def norm(text: str) -> str:
    """Lower case, one space, straight quotes, line-end hyphenation joined (PDF text)."""
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    text = re.sub(r"(\w)-\s*\n\s*(\w)", r"\1\2", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def passage_holds(document: str, text: str, expect: dict) -> bool:
    """`text` (of `document`) is a right passage for a question expecting `expect`:
    {"document": name, "contains": [substring, ...]} or {"document": name, "span": answer section}."""
    if expect.get("document") and document != expect["document"]:
        return False
    body = norm(text)
    if "span" in expect:
        section = norm(expect["span"])
        return any(body[i : i + SPAN] in section for i in range(max(1, len(body) - SPAN + 1)))
    return any(norm(s) in body for s in expect.get("contains", []))


def content_words(text: str) -> list[str]:
    text = CITATION.sub(" ", text)
    return [w for w in re.findall(r"[^\W\d_][\w']+", text.lower()) if len(w) > 2 and w not in STOPWORDS]


def support(answer: str, passages: list[str]) -> float:
    """The share of the answer's content words found in the passages it was given."""
    words = content_words(answer)
    vocabulary = set(content_words(" ".join(passages)))
    return sum(w in vocabulary for w in words) / len(words) if words else 0.0


# --- degenerate answers -----------------------------------------------------------------------

DOTTED_LEADER = re.compile(r"(?:\.\s?){4,}\s*\d{1,4}\b")
NUMBERED_HEADING_WITH_PAGE = re.compile(r"(?<![\d.])\d{1,2}(?:\.\d{1,2}){1,3}\s+[A-Z][^.\n|]{2,70}?\s\d{1,4}(?=\s|$)")
INDEX_ENTRY = re.compile(r"\b[a-z][\w ()-]{1,40},\s\d{1,4}(?:,\s\d{1,4})*\b")
MARKDOWN_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$", re.M)
LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S", re.M)


def loops(answer: str) -> bool:
    """A run of four words three times. Words have a letter or digit: a Markdown table's
    "| --- | --- |" rule and empty cells are its layout, not a loop."""
    words = [w for w in CITATION.sub(" ", answer).lower().split() if any(c.isalnum() for c in w)]
    grams = Counter(tuple(words[i : i + 4]) for i in range(len(words) - 3))
    return any(count >= 3 for count in grams.values())


def toc_dump(answer: str) -> bool:
    """Table-of-contents or index lines given as the answer: dotted leaders before a page
    number, two numbered headings followed by a page number, or three index entries."""
    text = CITATION.sub(" ", answer)
    return (
        bool(DOTTED_LEADER.search(text))
        or len(NUMBERED_HEADING_WITH_PAGE.findall(text)) >= 2
        or len(INDEX_ENTRY.findall(text)) >= 3
    )


def raw_pipes(answer: str) -> bool:
    """Table cells joined by `|` that do not make a Markdown table (no |---| rule line)."""
    return answer.count("|") >= 4 and not MARKDOWN_TABLE_RULE.search(answer)


def list_dump(answer: str) -> bool:
    """Eight or more list items of a few words each: an outline pasted, not an answer."""
    items = [line for line in answer.splitlines() if LIST_ITEM.match(line)]
    return len(items) >= 8 and sum(len(i.split()) for i in items) / len(items) <= 6


def degenerate_kind(answer: str, finish_reason: str = "") -> str:
    """Why the answer is degenerate ("" when it is not)."""
    if finish_reason == "length":
        return "token_cap"
    for kind, test in (("toc", toc_dump), ("pipes", raw_pipes), ("loop", loops), ("list", list_dump)):
        if test(answer):
            return kind
    return ""


# --- garbage ----------------------------------------------------------------------------------


def _script(char: str) -> str:
    name = unicodedata.name(char, "")
    if name.startswith(("CJK", "HIRAGANA", "KATAKANA")):
        return "CJK"
    return name.split(" ", 1)[0]


def wrong_script(answer: str, lang: str, allowed_text: str = "") -> list[str]:
    """Runs of 2+ letters in a script the question's language is not written in, and that
    are not in `allowed_text` (the passages and the question): e.g. Arabic in an English answer."""
    expected = "LATIN" if lang in LATIN_LANGUAGES else SCRIPT_OF_LANGUAGE.get(lang, "LATIN")
    runs, current = [], []
    for char in answer + " ":
        if char.isalpha() and _script(char) not in (expected, "LATIN"):
            current.append(char)
            continue
        if len(current) >= 2:
            runs.append("".join(current))
        current = []
    allowed = allowed_text.lower()
    return [run for run in runs if run.lower() not in allowed]


def _sentence_openers(text: str) -> set[int]:
    starts = {0}
    for match in re.finditer(r"(?:[.!?:;]\s+|\n\s*(?:[-*•]|\d+[.)])?\s*|\(\s*|\"\s*)", text):
        starts.add(match.end())
    return starts


def invented_facts(answer: str, grounding: str, accepted: list[str] | None = None) -> list[str]:
    """Numbers (2+ digits) and capitalised names in the answer that appear nowhere in
    `grounding` (the passages and the question) nor in `accepted` (a general-knowledge answer)."""
    text = CITATION.sub(" ", answer)
    known = norm(grounding + " " + " ".join(accepted or []))
    known_digits = re.sub(r"[,\s]", "", known)
    openers = _sentence_openers(text)
    found = []
    for match in re.finditer(r"\d[\d,.]*\d|\b\d{2,}\b", text):
        number = match.group().strip(".,")
        if len(re.sub(r"\D", "", number)) >= 2 and re.sub(r",", "", number) not in known_digits:
            found.append(number)
    for match in re.finditer(r"\b[A-Z][\w'’-]*[a-z][\w'’-]*\b|\b[A-Z]{2,}[a-z]*\b", text):
        word = match.group()
        if match.start() in openers or word in COMMON_CAPITALS or word.lower().rstrip("'’s") in STOPWORDS:
            continue
        if norm(word) not in known and norm(word).rstrip("s") not in known:
            found.append(word)
    return list(dict.fromkeys(found))


# --- abstention -------------------------------------------------------------------------------

# Words that introduce the closest passages rather than answer ("the closest passages I found:").
FRAMING = set(
    "closest nearest related passage passages found searched listed below here might help relevant team's team".split()
)


def abstains(answer: str) -> bool:
    return bool(ABSTAIN.search(answer))


def abstained_correctly(answer: str, passages: list[str]) -> bool:
    """Says the documents do not cover it (in its first 300 characters) and gives no answer
    of its own: what follows the abstaining sentence is empty or the passages' own words
    (the closest passages shown), never a free answer."""
    match = ABSTAIN.search(answer)
    if match is None or match.start() > 300:
        return False
    rest = re.split(r"(?<=[.!?:])\s", answer[match.end() :], maxsplit=1)
    rest_words = [w for w in content_words(rest[1] if len(rest) > 1 else "") if w not in FRAMING]
    if len(rest_words) <= 3:
        return True
    vocabulary = set(content_words(" ".join(passages)))
    return sum(w in vocabulary for w in rest_words) / len(rest_words) >= 0.9
