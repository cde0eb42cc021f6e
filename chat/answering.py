"""Keeping an answer honest: does the retrieved text answer the question at all, is the
model's answer repeating itself or saying things the passages do not, and what to say
instead (the passages' own sentences, each with its [Document N]).

Pure text functions, no database and no model: the agent feeds them what it retrieved and
what the model streams.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from chat.passage_text import ends_sentence, is_toc_line, names, plain, scripts, sentences, words_lower

CITATION = re.compile(r"\s*\[Document\s+(\d+)\]", re.I)
# "[Chunk 0]": a small model citing the chunk attribute of <document_chunk> too; a strict guard
# (a sentence at a time) never shows it.
CHUNK_MARK = re.compile(r"\s*\[Chunk\s+\d+\]", re.I)
_WORD = re.compile(r"[a-z0-9][a-z0-9_+#'-]*")
# Words that carry no topic: function words, and the words of a question's frame.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
during each few for from further had hadn't has hasn't have haven't having he her here hers herself him himself his
how i if in into is isn't it it's its itself just let's me more most mustn't my myself no nor not now of off on once
only or other ought our ours ourselves out over own same shan't she should shouldn't so some such than that that's
the their theirs them themselves then there there's these they this those through to too under until up very was
wasn't we were weren't what what's when where which while who whom why will with won't would wouldn't you your
yours yourself yourselves tell explain describe know want need please thanks thank way ways get got make made
something anything thing things kind sort much many does say says said use used using""".split()
)
# A number as written ("45", "12,500", "3.11"); compared without its separators.
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n")
MAX_TABLE_ROWS = 8  # an extractive answer from a table: its header and at most this many rows

# A strict guard's sentence must take most of its content words, and half of its pairs of
# consecutive content words, from the passages: a small model that recombines the passages'
# words into new claims fails the second.
MIN_SUPPORT = 0.75
MIN_PAIR_SUPPORT = 0.5
COVERAGE_WEIGHT = 0.35  # in relevance(): lexical coverage next to vector similarity


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light suffix strip, so "grouping"/"grouped"/"groups" and "group" meet."""
    word = word.strip("'-")
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "es", "ed", "ly", "s"):
        if len(word) - len(suffix) >= 4 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return word


def terms(text: str) -> list[str]:
    """The content words of a text, stemmed; citation markers are not words."""
    text = CITATION.sub(" ", text.lower())
    return [stem(w) for w in _WORD.findall(text) if w not in STOPWORDS and len(w) > 1]


# --- does the retrieved text answer the question? --------------------------------------------


def coverage(question: str, passage_text: str) -> float:
    """Share of the question's topic words (stemmed) that the passage contains."""
    wanted = set(terms(question))
    if not wanted:
        return 0.0
    have = set(terms(passage_text))
    return sum(1 for t in wanted if t in have) / len(wanted)


def relevance(question: str, hits: list, passages: list, coverage_weight: float = COVERAGE_WEIGHT) -> float:
    """How near the retrieved text is to answering: the best vector similarity plus
    `coverage_weight` x the best passage's coverage of the question's topic words. Retrieval
    always returns its nearest chunks; this says whether the nearest are near enough (the
    embedding model's floor: llm/embedding_specs.py, chat/retrieve.py relevance_rule)."""
    similarity = max((h.similarity or 0.0 for h in hits), default=0.0)
    if not coverage_weight:
        return similarity
    return similarity + coverage_weight * max((coverage(question, p.text) for p in passages), default=0.0)


# --- the passages' own sentences -------------------------------------------------------------


def extractive_answer(question: str, passages: list, **choice) -> str:
    """The whole extractive answer at once (`extractive_sentences`, joined)."""
    return "".join(extractive_sentences(question, passages, **choice)).strip()


def extractive_sentences(
    question: str,
    passages: list,
    *,
    max_words: int = 90,
    min_match: float = 0.0,
    said: str = "",
    within: int | None = None,
) -> Iterator[str]:
    """The sentences of the best passages that answer the question, each with its
    [Document N], yielded one at a time as each is chosen: from the best-matching sentence on
    (after it, when it is a heading or a question) to the end of its section, up to
    `max_words`. A table answers with its header and the rows that match. Nothing when no
    sentence matches at least `min_match` of the question's topic words (weighted by rarity). `said`: what the answer
    already says; a sentence whose content words it mostly holds (MIN_SUPPORT) is left out.
    `within`: only passage number `within` (the one the answer so far cites)."""
    wanted = set(terms(question))
    candidates = [
        (n, i, s, kind)
        for n, p in enumerate(passages, start=1)
        if within in (None, n)
        for i, (s, kind) in enumerate(sentences(plain(p.text)))
    ]
    if not wanted or not candidates:
        return
    df = Counter(t for c in candidates for t in set(terms(c[2])))
    weight = {t: math.log(1 + len(candidates) / (1 + df[t])) for t in wanted}
    total = sum(weight.values()) or 1.0

    def score(candidate):
        found = set(terms(candidate[2])) if candidate[3] != "code" else set()
        return sum(weight[t] for t in wanted if t in found) / total - 0.01 * candidate[0]

    best = max(candidates, key=score)
    if score(best) + 0.01 * best[0] < min_match:
        return
    following = []
    for n, i, s, kind in candidates:
        if n != best[0] or i < best[1]:
            continue
        if kind == "heading" and i > best[1]:
            break  # the next section is about something else
        if kind != "heading" and not s.endswith("?"):
            following.append((n, s, kind))
    while following and following[0][2] == "code":
        following.pop(0)
    if said:
        known = set(terms(said))
        following = [
            (n, s, kind) for n, s, kind in following if kind in ("code", "table") or not _mostly_in(terms(s), known)
        ]
    yield from _quoted(following, wanted, max_words)


def focused(question: str, passages: list, max_words: int) -> list:
    """The passages as a small model reads them: each cut to its sentences nearest the question,
    `max_words` words in all (the best-ranked passage half of them, the others an even share of
    the rest), so the prompt stays within the model's first-token budget (a 0.5B model on 2 cores
    reads ~100 prompt tokens a second: bench/chat_models.py). A cut passage keeps its best-
    matching sentence (by the question's topic words, weighted by rarity), what follows it, then
    what comes before it, in the document's order; a table keeps its header and matching rows.
    The guard and the passages' own answer still read the whole passages."""
    if not passages:
        return passages
    wanted = set(terms(question))
    split = [[(s, kind) for s, kind in sentences(plain(p.text))] for p in passages]
    df = Counter(t for ss in split for s, _ in ss for t in set(terms(s)))
    count = sum(len(ss) for ss in split) or 1
    weight = {t: math.log(1 + count / (1 + df[t])) for t in wanted}
    shares = (
        [max_words]
        if len(passages) == 1
        else [max_words // 2] + [(max_words - max_words // 2) // (len(passages) - 1)] * (len(passages) - 1)
    )
    out = []
    for passage, parts, share in zip(passages, split, shares):
        if len(passage.text.split()) <= share or not parts:
            out.append(passage)
            continue
        parts = [(table_rows(s, wanted) if kind == "table" else s, kind) for s, kind in parts]
        scores = [sum(weight[t] for t in wanted if t in set(terms(s))) for s, _ in parts]
        best = max(range(len(parts)), key=lambda i: (scores[i], -i))
        if len(parts[best][0].split()) > share:  # the best sentence alone is longer: its start
            parts[best] = (" ".join(parts[best][0].split()[:share]) + " …", parts[best][1])
        chosen, words = [best], len(parts[best][0].split())
        for step in (range(best + 1, len(parts)), range(best - 1, -1, -1)):
            for i in step:
                size = len(parts[i][0].split())
                if words + size > share:
                    break
                chosen.append(i)
                words += size
        out.append(_with_text(passage, "\n".join(parts[i][0] for i in sorted(chosen))))
    return out


def _with_text(passage, text: str):
    if dataclasses.is_dataclass(passage):
        return dataclasses.replace(passage, text=text)
    clone = copy.copy(passage)  # a benchmark's SimpleNamespace
    clone.text = text
    return clone


def _quoted(following: list[tuple[int, str, str]], wanted: set[str], max_words: int) -> Iterator[str]:
    """Each chosen sentence as the answer shows it: prose cited, code fenced, a table as its
    header and matching rows; separated from the one before ("" first, a space after prose,
    a blank line around blocks)."""
    words, block = 0, None
    for n, s, kind in following:
        if kind == "table":
            s = table_rows(s, wanted)
        if words and words + len(s.split()) > max_words:
            break
        if kind == "code":
            piece = f"```\n{s.strip()}\n```"
        elif kind == "table":
            piece = f"{s}\n\n[Document {n}]"
        else:
            piece = cite(s, n)
        yield ("" if block is None else "\n\n" if block or kind != "prose" else " ") + piece
        words, block = words + len(s.split()), kind != "prose"


def table_rows(table: str, wanted: set[str]) -> str:
    """A Markdown table cut to its header and the rows that hold a topic word of the question
    its header does not (all rows when none does), at most MAX_TABLE_ROWS."""
    lines = table.split("\n")
    has_rule = len(lines) > 1 and re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", lines[1].replace(" ", "")) is not None
    header, rows = (
        (lines[:2], lines[2:]) if has_rule else ([lines[0], "|" + " --- |" * (lines[0].count("|") - 1)], lines[1:])
    )
    asked = wanted - set(terms(header[0]))
    matching = [row for row in rows if asked & set(terms(row))] or rows
    return "\n".join(header + matching[:MAX_TABLE_ROWS])


def numbers(text: str) -> set[str]:
    """The numbers of two or more digits in `text` ("12,500" and "12500" alike): a small
    model's figures must come from the passages or the question (a list's "1." need not)."""
    found = {re.sub(r"[.,]", "", n) for n in _NUMBER.findall(text)}
    return {n for n in found if len(n) >= 2}


def _mostly_in(words: list[str], known: set[str]) -> bool:
    return bool(words) and sum(1 for w in words if w in known) / len(words) >= MIN_SUPPORT


# --- the model's answer, sentence by sentence ------------------------------------------------


@dataclass
class Guard:
    """Releases the model's answer as it streams and stops it when it goes wrong.

    Always: nothing is released that would make a run of `loop_words` words appear three
    times, and the answer stops there: 4 for small models, 8 outside code blocks for capable
    ones (a loop, not a turn of phrase or a repetitive code line). Loose: text is released a
    word at a time. Strict (small models): a sentence at a time (or every MAX_HELD
    characters; `by_sentence` does that without the support check, and `max_sentences` ends
    a small model's answer before it rambles to its token cap). A strict guard stops the
    answer at a sentence that repeats an earlier one, whose content words are mostly not in
    the passages, that has a number of two or more digits or a capitalised name neither the
    passages nor the question have, that is in a script neither uses, that is a table-of-
    contents, index or table line, or that is a question; each released sentence is cited with the passage
    it overlaps most (a small model's own [Document N] markers are unreliable)."""

    passages: list
    strict: bool = False
    loop_words: int = 0  # the run of words that may not appear three times (0: 4 strict, 8 loose)
    by_sentence: bool | None = None  # release a sentence at a time (None: when strict)
    max_sentences: int = 0  # stop after this many sentences (0: no limit)
    question: str = ""  # strict: the first sentence must share a topic word with it
    stopped: str = ""  # "", "repeat", "unsupported", "wrong_script", "off_topic" or "enough"
    released: list[str] = field(default_factory=list)
    _buffer: str = ""
    _words: list = field(default_factory=list)
    _seen: Counter = field(default_factory=Counter)
    _sentences: set = field(default_factory=set)
    _in_code: bool = False
    _pending: list = field(default_factory=list)  # strict: short pieces waiting for a sentence

    MAX_HELD = 240

    def __post_init__(self):
        self.loop_words = self.loop_words or (4 if self.strict else 8)
        self.by_sentence = self.strict if self.by_sentence is None else self.by_sentence
        # The passages' terms serve the strict checks and citations only.
        lists = [terms(p.text) for p in self.passages] if self.strict else []
        self._passage_terms = [set(t) for t in lists]
        self._all_terms = set().union(*self._passage_terms) if lists else set()
        self._all_pairs = {pair for t in lists for pair in zip(t, t[1:])}
        self._question_terms = set(terms(self.question))
        self._numbers = (
            set().union(numbers(self.question), *(numbers(p.text) for p in self.passages)) if self.strict else set()
        )
        known = [self.question] + [p.text for p in self.passages] if self.strict else []
        self._known_words = set().union(*(words_lower(text) for text in known)) if known else set()
        self._scripts = set().union(*(scripts(text) for text in known)) if known else set()

    def feed(self, text: str) -> str:
        """Text that may be shown now ("" while a sentence or word is still being written)."""
        if self.stopped:
            return ""
        self._buffer += text
        out = []
        while not self.stopped:
            end = self._boundary() or (len(self._buffer) if len(self._buffer) > self.MAX_HELD else 0)
            if not end:
                break
            piece, self._buffer = self._buffer[:end], self._buffer[end:]
            out.append(self._check(piece))
        return "".join(out)

    def flush(self) -> str:
        """The end of the stream: the last, unfinished piece. (Short pieces a strict guard
        held back, "The answer:" or "1.", are dropped unless a sentence followed them.)"""
        if self.stopped or not self._buffer.strip():
            return ""
        piece, self._buffer = self._buffer, ""
        return self._check(piece)

    def _boundary(self) -> int:
        """Where the first piece to judge ends in the buffer (0: not written yet): a word, or
        a sentence, which does not end after "Dr." or "e.g." or an initial."""
        if not self.by_sentence:
            match = re.search(r"\s+", self._buffer)
            return match.end() if match else 0
        for match in _SENTENCE_BREAK.finditer(self._buffer):
            if "\n" in match.group() or ends_sentence(self._buffer[: match.start()]):
                return match.end()
        return 0

    @property
    def answered(self) -> bool:
        """Whether anything of substance was released (strict: a sentence that was judged)."""
        text = "".join(self.released)
        return len(terms(text)) >= 3 if self.strict else bool(text.strip())

    def _check(self, piece: str) -> str:
        piece = CHUNK_MARK.sub("", piece)
        body = piece.strip()
        if not body:  # (strict: no blank lines before the first sentence it released)
            return piece if not self.strict or self.released else ""
        claim = CITATION.sub(" ", body)  # the sentence without its [Document N] markers
        words = re.findall(r"\w+", claim.lower())
        if self.loop_words > 4:
            in_code = self._in_code
            self._in_code ^= body.count("```") % 2 == 1
            if in_code or "```" in body:
                words = []
        n = self.loop_words
        # The runs of n words that end in this piece: only the last n - 1 words before it
        # take part (not a copy of the whole answer per word: this runs for every token).
        window = (self._words[-(n - 1) :] if n > 1 else []) + words
        grams = [tuple(window[j - n + 1 : j + 1]) for j in range(len(window) - len(words), len(window)) if j >= n - 1]
        if any(self._seen[g] + grams.count(g) >= 3 for g in grams):
            self.stopped = "repeat"
            return ""
        if self.strict:
            found = terms(body)
            key = " ".join(words)
            if len(words) >= 3 and key in self._sentences:
                self.stopped = "repeat"
                return ""
            if claim.lstrip().startswith("#"):
                # A chunk's heading ("[Document 2]## Parental leave"): the model is reciting the
                # chunks it was shown, not answering. Before the answer it is left out (with the
                # marker held before it); after it, the answer ends there.
                self._pending = []
                if self._sentences:
                    self.stopped = "enough"
                return ""
            # Checked before "too short to judge": a held piece is shown unjudged later.
            made_up = self._made_up(claim)
            if made_up:
                self.stopped = made_up
                return ""
            if len(found) < 3:  # too short to judge: shown with the next sentence, if one comes
                self._pending.append(piece)
                if sum(len(p) for p in self._pending) > self.MAX_HELD:
                    # Short lines and no sentence ("[Document 1]", "1.", …): stopped here, or
                    # the person would wait for the whole generation to see nothing.
                    self.stopped = "unsupported"
                return ""
            pairs = list(zip(found, found[1:]))
            if (
                sum(1 for t in found if t in self._all_terms) / len(found) < MIN_SUPPORT
                or sum(1 for p in pairs if p in self._all_pairs) / len(pairs) < MIN_PAIR_SUPPORT
            ):
                self.stopped = "unsupported"
                return ""
            # A question instead of an answer (a small model echoing a heading or asking
            # back): the passages answer instead.
            if claim.rstrip().endswith("?"):
                self.stopped = "unsupported"
                return ""
            if not self._sentences and self._question_terms and not self._question_terms & set(found):
                self.stopped = "off_topic"  # supported, but about something else (an earlier question)
                return ""
            self._sentences.add(key)
            piece = "".join(self._pending) + self._cite(piece, set(found))
            self._pending = []
        self._words.extend(words)
        self._seen.update(grams)
        self.released.append(piece)
        if self.by_sentence and self.max_sentences and len(self.released) >= self.max_sentences:
            self.stopped = "enough"
        return piece

    def _made_up(self, claim: str) -> str:
        """Why a strict guard stops at this piece before judging its words ("" when it does
        not): text in a script neither the question nor the passages use ("wrong_script"); a
        figure (two digits or more) or a capitalised name that neither has; a table-of-
        contents, index or table line ("unsupported": the passages answer instead)."""
        if scripts(claim) - self._scripts:
            return "wrong_script"
        if numbers(claim) - self._numbers or names(claim) - self._known_words:
            return "unsupported"
        if is_toc_line(claim) or claim.lstrip().startswith("|"):
            return "unsupported"
        return ""

    def _cite(self, sentence: str, found: set) -> str:
        best = max(range(len(self.passages)), key=lambda i: (len(found & self._passage_terms[i]), -i))
        return cite(CITATION.sub("", sentence), best + 1)


def cite(sentence: str, n: int) -> str:
    """The sentence with [Document n] before its closing punctuation ("… a year [Document 1].")."""
    trailing = sentence[len(sentence.rstrip()) :]
    body = sentence.rstrip()
    end = len(body.rstrip(".!?:;,"))
    stop = body[end:] if body[end:] in ("", ".", "!", "?") else "."
    return f"{body[:end]} [Document {n}]{stop if body[end:] else ''}{trailing}"
