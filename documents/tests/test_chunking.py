"""The chunker's guarantees, checked on built documents: no cut words, bounded sizes,
overlaps, page ranges, heading paths, CSV headers in every chunk, determinism, speed."""

from __future__ import annotations

import random
import re
import time

import pytest

from documents.chunking import ChunkDraft, chunk_document, embedding_text
from documents.parsing import ParsedDocument, Section


def words(text: str) -> int:
    return len(text.split())


def prose(seed: int, paragraphs: int, *, wrap: int | None = None) -> str:
    """Random sentences in paragraphs; `wrap` hard-wraps lines like PDF or e-mail text."""
    rng = random.Random(seed)
    vocabulary = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "kappa",
        "lambda",
        "omega",
        "sigma",
        "tau",
        "upsilon",
        "zeta",
        "theta",
        "iota",
        "rho",
        "phi",
        "chi",
        "psi",
        "mu",
        "nu",
        "extraordinarily",
        "a",
        "I",
        "of",
        "to",
        "configuration",
        "it",
    ]
    blocks = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(1, 9)):
            sentence = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(2, 30)))
            sentences.append(sentence.capitalize() + rng.choice([".", ".", ".", "?", "!"]))
        paragraph = " ".join(sentences)
        if wrap:
            paragraph = "\n".join(_wrap(paragraph, wrap))
        blocks.append(paragraph)
    return "\n\n".join(blocks)


def _wrap(text: str, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    return lines + [current]


def locate(text: str, chunks: list[ChunkDraft]) -> list[tuple[int, int]]:
    """Where each chunk's content lies in `text`, asserting they appear in order."""
    spans, search_from = [], 0
    for chunk in chunks:
        start = text.find(chunk.content, search_from)
        assert start >= 0, f"chunk {chunk.index} is not a slice of the text"
        spans.append((start, start + len(chunk.content)))
        search_from = start + 1
    return spans


def assert_clean_cuts(text: str, spans: list[tuple[int, int]]) -> None:
    for start, end in spans:
        assert start == 0 or text[start - 1].isspace(), f"cut before {text[start - 5 : start + 10]!r}"
        assert end == len(text) or text[end].isspace(), f"cut after {text[end - 10 : end + 5]!r}"
        assert not text[start].isspace() and not text[end - 1].isspace()


def single(text: str, **section) -> ParsedDocument:
    return ParsedDocument(title="Doc", sections=[Section(text=text, **section)])


# --- the core guarantees --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("wrap", [None, 72])
@pytest.mark.parametrize("size, overlap", [(800, 200), (300, 60), (1500, 0)])
def test_chunks_cover_the_text_without_cutting_words(seed, wrap, size, overlap):
    text = prose(seed, paragraphs=40, wrap=wrap)
    chunks = chunk_document(single(text), size=size, overlap=overlap, count_tokens=words)
    spans = locate(text, chunks)
    assert_clean_cuts(text, spans)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (start, end), (next_start, next_end) in zip(spans, spans[1:]):
        assert next_start > start and next_end > end  # progress
        assert next_start <= end + 3  # nothing skipped but the whitespace between
        assert end - next_start <= overlap  # overlap within the bound
    for chunk in chunks:
        assert chunk.content and len(chunk.content) <= size
        assert chunk.token_count == words(chunk.content)
    for chunk in chunks[:-1]:
        assert len(chunk.content) >= size // 2 - 30  # the second half of the window holds a break


def test_consecutive_chunks_overlap_by_about_the_overlap():
    text = prose(1, paragraphs=60)
    chunks = chunk_document(single(text), size=800, overlap=200, count_tokens=words)
    spans = locate(text, chunks)
    overlaps = [end - next_start for (_, end), (next_start, _) in zip(spans, spans[1:])]
    assert all(0 < o <= 200 for o in overlaps), overlaps
    assert sum(overlaps) / len(overlaps) > 100  # mostly between overlap/2 and overlap


def test_no_overlap_when_overlap_is_zero():
    text = prose(2, paragraphs=30)
    spans = locate(text, chunk_document(single(text), size=500, overlap=0, count_tokens=words))
    assert all(next_start >= end for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_chunks_prefer_paragraph_then_sentence_ends():
    paragraph = "Short sentence here. " * 15  # 315 characters
    text = "\n\n".join([paragraph.strip()] * 6)
    chunks = chunk_document(single(text), size=800, overlap=0, count_tokens=words)
    assert all(c.content.endswith("here.") for c in chunks)
    assert chunks[0].content == "\n\n".join([paragraph.strip()] * 2)  # two whole paragraphs


def test_wrapped_prose_ends_chunks_at_sentences_not_at_wrapped_lines():
    text = prose(3, paragraphs=1, wrap=60) + " " + prose(4, paragraphs=1, wrap=60)
    text = text.replace("\n\n", "\n")
    chunks = chunk_document(single(text), size=400, overlap=0, count_tokens=words)
    assert sum(c.content[-1] in ".?!" for c in chunks[:-1]) >= len(chunks[:-1]) - 1


def test_small_text_is_one_chunk_and_blank_sections_give_none():
    parsed = ParsedDocument(title="T", sections=[Section(text="  Just this.  "), Section(text=" \n\n ")])
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    assert [(c.index, c.content, c.token_count) for c in chunks] == [(0, "Just this.", 2)]


def test_a_word_longer_than_the_chunk_is_the_only_thing_cut():
    blob = "x" * 2500
    text = f"Start here. {blob} and the end."
    chunks = chunk_document(single(text), size=1000, overlap=100, count_tokens=words)
    assert all(len(c.content) <= 1000 for c in chunks)
    assert "".join(c.content for c in chunks if c.content.startswith("x") or "x" * 50 in c.content).count("x") >= 2500
    assert chunks[-1].content.endswith("and the end.")


def test_text_without_spaces_for_cjk_sentences():
    text = "これは文です。" * 300
    chunks = chunk_document(single(text), size=200, overlap=20, count_tokens=len)
    assert all(len(c.content) <= 200 and c.content.endswith("。") for c in chunks[:-1])


def test_invalid_sizes_are_refused():
    with pytest.raises(ValueError):
        chunk_document(single("x"), size=0, overlap=0, count_tokens=words)
    with pytest.raises(ValueError):
        chunk_document(single("x"), size=100, overlap=100, count_tokens=words)


def test_chunking_is_deterministic():
    parsed = single(prose(5, paragraphs=50))
    first = chunk_document(parsed, size=700, overlap=150, count_tokens=words)
    assert first == chunk_document(parsed, size=700, overlap=150, count_tokens=words)


# --- sections, headings and pages -----------------------------------------------------


def test_chunks_never_span_sections_and_keep_heading_paths():
    parsed = ParsedDocument(
        title="Guide",
        sections=[
            Section(text="Preface text.", heading_path=[]),
            Section(text="# Install\n\n" + prose(6, paragraphs=8), heading_path=["Install"]),
            Section(text="## Linux\n\nUse the package manager.", heading_path=["Install", "Linux"]),
        ],
    )
    chunks = chunk_document(parsed, size=500, overlap=100, count_tokens=words)
    assert chunks[0].content == "Preface text." and chunks[0].heading_path == []
    install = [c for c in chunks if c.heading_path == ["Install"]]
    assert len(install) > 2 and install[0].content.startswith("# Install")
    assert chunks[-1].content == "## Linux\n\nUse the package manager."
    assert chunks[-1].heading_path == ["Install", "Linux"]
    for chunk in install:
        assert "Preface" not in chunk.content and "Linux" not in chunk.content


def test_pdf_pages_flow_together_and_page_ranges_follow_the_text():
    pages = [prose(10 + n, paragraphs=3, wrap=80) for n in range(6)]
    parsed = ParsedDocument(
        title="P",
        sections=[
            Section(text=t, heading_path=["Chapter"], page_start=n + 1, page_end=n + 1) for n, t in enumerate(pages)
        ],
    )
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    flow = "\n".join(pages)
    page_starts = [flow.index(p) for p in pages]

    def page_of(position: int) -> int:
        return max(n for n, s in enumerate(page_starts) if s <= position) + 1

    spans = locate(flow, chunks)
    assert_clean_cuts(flow, spans)
    for chunk, (start, end) in zip(chunks, spans):
        assert (chunk.page_start, chunk.page_end) == (page_of(start), page_of(end - 1))
    assert any(c.page_start < c.page_end for c in chunks)
    assert chunks[0].page_start == 1 and chunks[-1].page_end == 6


def test_pages_under_different_headings_do_not_flow_together():
    parsed = ParsedDocument(
        title="P",
        sections=[
            Section(text="End of chapter one.", heading_path=["One"], page_start=1, page_end=1),
            Section(text="Start of chapter two.", heading_path=["Two"], page_start=1, page_end=1),
            Section(text="More of two.", heading_path=["Two"], page_start=2, page_end=2),
        ],
    )
    chunks = chunk_document(parsed, size=800, overlap=200, count_tokens=words)
    assert [(c.content, c.heading_path, c.page_start, c.page_end) for c in chunks] == [
        ("End of chapter one.", ["One"], 1, 1),
        ("Start of chapter two.\nMore of two.", ["Two"], 1, 2),
    ]


# --- tables (CSV) ---------------------------------------------------------------------


def test_every_chunk_of_a_table_starts_with_its_header():
    header = "| id | name | comment |\n| --- | --- | --- |"
    rows = [f"| {i} | Person {i} | {'some words ' * (i % 7)}|" for i in range(300)]
    parsed = ParsedDocument(
        title="people", sections=[Section(text=header + "\n" + "\n".join(rows), heading_path=["people"])]
    )
    for size, overlap in [(800, 200), (300, 100), (120, 20)]:
        chunks = chunk_document(parsed, size=size, overlap=overlap, count_tokens=words)
        seen = set()
        for chunk in chunks:
            assert chunk.content.startswith(header + "\n")
            assert chunk.heading_path == ["people"]
            body = chunk.content[len(header) + 1 :].split("\n")
            # Rows up to ~100 characters fit a 300-character chunk whole; a chunk smaller
            # than a row must split it, and still repeats the header.
            if size >= 300:
                assert len(chunk.content) <= size
                assert all(re.fullmatch(r"\| \d+ \| Person \d+ \| .*\|", row) for row in body)  # whole rows
            seen.update(body)
        assert set(rows) <= seen or size < 300


def test_a_table_that_fits_is_one_chunk_and_a_header_alone_is_kept():
    table = "| a | b |\n| --- | --- |\n| 1 | 2 |"
    assert [c.content for c in chunk_document(single(table), count_tokens=words)] == [table]
    assert [c.content for c in chunk_document(single("| a | b |\n| --- | --- |"), count_tokens=words)] == [
        "| a | b |\n| --- | --- |"
    ]


# --- embedding text -------------------------------------------------------------------


def test_embedding_text_prepends_title_and_heading_path():
    chunk = ChunkDraft(
        index=0, content="Body.", token_count=1, page_start=None, page_end=None, heading_path=["Install", "Linux"]
    )
    assert embedding_text(chunk, "Guide") == "Guide > Install > Linux\n\nBody."
    assert chunk.content == "Body."
    csv_chunk = ChunkDraft(
        index=0, content="| a |", token_count=2, page_start=None, page_end=None, heading_path=["people"]
    )
    assert embedding_text(csv_chunk, "people") == "people\n\n| a |"
    bare = ChunkDraft(index=0, content="x", token_count=1, page_start=None, page_end=None, heading_path=[])
    assert embedding_text(bare, "") == "x"


# --- speed ----------------------------------------------------------------------------


def _fastest(run, tries: int = 5) -> float:
    """The quickest of a few runs, in this process's CPU time: what the work costs, not how long
    other processes (the suite's other workers) kept it waiting for a core."""
    times = []
    for _ in range(tries):
        started = time.process_time()
        run()
        times.append(time.process_time() - started)
    return min(times)


# Speed itself is measured in bench/ (docs/benchmarks.md), never asserted as wall-clock time
# here; these tests check that chunking grows linearly: twice the text takes about twice the
# time (a quadratic step would take four times as long), whatever the machine's load.


def test_a_300_page_megabyte_chunks_in_linear_time():
    pages = [prose(1000 + n, paragraphs=4, wrap=90) for n in range(300)]
    scale = max(1, 1_000_000 // sum(len(p) for p in pages) + 1)
    pages = [("\n\n".join([p] * scale)) for p in pages]

    def parsed(count):
        return ParsedDocument(
            title="Big",
            sections=[
                Section(text=t, heading_path=[], page_start=n + 1, page_end=n + 1) for n, t in enumerate(pages[:count])
            ],
        )

    assert sum(len(p) for p in pages) >= 1_000_000
    half, whole = parsed(150), parsed(300)
    chunks = chunk_document(whole, size=800, overlap=200, count_tokens=words)
    assert chunks[-1].page_end == 300
    t_half = _fastest(lambda: chunk_document(half, size=800, overlap=200, count_tokens=words))
    t_whole = _fastest(lambda: chunk_document(whole, size=800, overlap=200, count_tokens=words))
    assert t_whole < 3.0 * t_half + 0.05, (t_half, t_whole)


def test_one_megabyte_section_without_line_breaks_is_linear():
    text = " ".join(["word"] * 200_000)  # 1 MB, one line, no sentence ends
    half = " ".join(["word"] * 100_000)
    chunks = chunk_document(single(text), size=800, overlap=200, count_tokens=words)
    t_half = _fastest(lambda: chunk_document(single(half), size=800, overlap=200, count_tokens=words))
    t_whole = _fastest(lambda: chunk_document(single(text), size=800, overlap=200, count_tokens=words))
    assert t_whole < 3.0 * t_half + 0.05, (t_half, t_whole)
    assert all(len(c.content) <= 800 for c in chunks)
