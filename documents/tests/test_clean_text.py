"""Real documents read cleanly: a PDF's line-end hyphenation is joined when it is parsed
(real hyphens kept), and a deck's notes that carry their own label are not labelled twice."""

from __future__ import annotations

import pptx

from documents.parsing import parse_file
from documents.parsing.sections import dehyphenate
from documents.tests.files import make_pdf, write


def test_line_end_hyphenation_is_joined_and_real_hyphens_are_kept():
    assert dehyphenate("two identi-\ncal copies") == "two identical copies"
    assert dehyphenate("a well-\nknown rule") == "a well-known rule"  # a first half that keeps it
    assert dehyphenate("COVID-\n19 and Anglo-\nSaxon") == "COVID-19 and Anglo-Saxon"
    # The text itself says which it is: "cross-reference" elsewhere, "multithreaded" elsewhere.
    assert dehyphenate("see the cross-\nreference; a cross-reference") == "see the cross-reference; a cross-reference"
    assert dehyphenate("multi-\nthreaded code is multithreaded") == "multithreaded code is multithreaded"
    assert dehyphenate("a list -\nitem and a dash- \n") == "a list -\nitem and a dash- \n"


def test_a_pdfs_hyphenated_line_ends_are_joined_when_parsed(tmp_path):
    data = make_pdf(["The two files are identi-\ncal after the copy, a well-\nknown property of the tool."])
    text = parse_file(write(tmp_path, "x.pdf", data), "pdf", filename="x.pdf").sections[0].text
    assert "identical after" in text and "well-known property" in text and "identi-" not in text


def test_notes_with_their_own_label_are_labelled_once(tmp_path):
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Budget"
    slide.notes_slide.notes_text_frame.text = "Speaker note: mention the recall first."
    path = tmp_path / "deck.pptx"
    deck.save(path)
    text = parse_file(str(path), "pptx", filename="deck.pptx").sections[0].text
    assert text.endswith("Speaker notes: mention the recall first.") and text.count("note") == 1
