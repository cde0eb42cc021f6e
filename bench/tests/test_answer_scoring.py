"""answer_eval's judges (bench/answer_scoring.py) on the answers a small model gives: made-up
names and numbers, wrong scripts, tables of contents, loops and dumps, abstentions."""

from __future__ import annotations

from bench import answer_scoring as scoring

TOC_ANSWER = (
    "37 Packages . . . . . . . . . . . . . . . 997 37.1 Installing and Removing Packages "
    "............ 997 37.2 Using Packages ............ 1002"
)


def test_passage_holds_needs_the_expected_document_and_one_substring():
    expect = {"document": "octave.pdf", "contains": ["pkg install image-1.0.0.tar.gz"]}
    assert scoring.passage_holds("octave.pdf", "it can be installed with\npkg  install image-1.0.0.tar.gz", expect)
    assert not scoring.passage_holds("other.pdf", "pkg install image-1.0.0.tar.gz", expect)
    assert not scoring.passage_holds("octave.pdf", "pkg list shows the installed packages", expect)


def test_passage_holds_joins_pdf_hyphenation_and_curly_quotes():
    expect = {"document": "m.pdf", "contains": ["John W. Eaton's former professors"]}
    assert scoring.passage_holds("m.pdf", "the name of one of John W. Ea-\nton’s former professors", expect)


def test_passage_holds_a_shared_span_of_the_answer_section():
    section = "Guido van Rossum believes that using indentation for grouping is extremely elegant and contributes a lot"
    expect = {"document": "faq__design.rst.txt", "span": section}
    assert scoring.passage_holds("faq__design.rst.txt", "Why? " + section, expect)
    assert not scoring.passage_holds("faq__design.rst.txt", "Something else entirely about braces and blocks.", expect)


def test_table_of_contents_and_index_lines_are_degenerate():
    assert scoring.degenerate_kind(TOC_ANSWER) == "toc"
    assert scoring.toc_dump("2.1 Invoking Octave from the Command Line 15 2.2 Quitting Octave 19")
    assert scoring.toc_dump("packages, 997 pkg install, 998, 999 pkg load, 1002")
    assert not scoring.toc_dump(
        "Install it with pkg install image-1.0.0.tar.gz [Document 1]. Version 1.0.0 is current."
    )


def test_raw_pipes_are_degenerate_but_a_markdown_table_is_not():
    raw = "Project | Sponsor | Budget | Atlas data migration | Dr Helen Okafor | 180000"
    table = "| Project | Sponsor |\n|---|---|\n| Atlas data migration | Dr Helen Okafor |"
    assert scoring.degenerate_kind(raw) == "pipes"
    # A spreadsheet's table flattened onto one line (answer_eval, office corpus): its "| --- |"
    # cells repeat like a loop, but what a person sees is raw pipes.
    flattened = (
        "| Project | Sponsor | Owner | | --- | --- | --- | --- | --- | --- | "
        "| Atlas data migration | Dr Helen Okafor | Marek Nowak | [Document 1]"
    )
    assert scoring.degenerate_kind(flattened) == "pipes"
    assert scoring.degenerate_kind(table) == ""


def test_loops_list_dumps_and_the_token_cap_are_degenerate():
    assert scoring.degenerate_kind("The logo is trademarked. " * 4) == "loop"
    assert scoring.degenerate_kind("\n".join(f"- item {n}" for n in range(9))) == "list"
    assert scoring.degenerate_kind("A clean answer.", "length") == "token_cap"
    assert scoring.degenerate_kind("- first step\n- second step\n- third step") == ""
    # A six-column Markdown table's rule and empty cells are layout, not a loop.
    wide = (
        "| Project | Sponsor | Owner | Budget | Spent | Status |\n| --- | --- | --- | --- | --- | --- |\n"
        "| Atlas | Dr Helen Okafor | Marek Nowak | 180000 | 142500 | On track |\n|  |  |  |  |  |  |"
    )
    assert scoring.degenerate_kind(wide) == ""


def test_wrong_script_in_an_english_answer_is_garbage():
    assert scoring.wrong_script("The capital is Sydney. مرحبا بكم في", "en") == ["مرحبا", "بكم", "في"]
    assert scoring.wrong_script("Die Antwort steht im Abschnitt über Pakete.", "de") == []
    # Quoted from the passage (a Greek formula in a manual), it is not garbage.
    assert scoring.wrong_script("It prints αβγ", "en", allowed_text="the value αβγ") == []


def test_invented_names_and_numbers_are_found_only_when_no_passage_has_them():
    passages = "Remote employees receive a one-time equipment stipend of 650 euros. Receipts go to Ledgerly."
    grounded = "You receive 650 euros once, and submit the receipts in Ledgerly [Document 1]."
    invented = "You receive 650 euros, and Makassar pays another 1,200 euros in 2027."
    assert scoring.invented_facts(grounded, passages) == []
    assert scoring.invented_facts(invented, passages) == ["1,200", "2027", "Makassar"]


def test_a_general_answer_is_judged_against_what_the_question_accepts():
    wrong = "The capital city of Australia is Sydney."
    right = "The capital city of Australia is Canberra."
    question = "What is the capital of Australia?"
    assert scoring.invented_facts(wrong, question, accepted=["Canberra"]) == ["Sydney"]
    assert scoring.invented_facts(right, question, accepted=["Canberra"]) == []


def test_sentence_openers_are_not_taken_for_names():
    assert scoring.invented_facts("Yes. Octave installs packages. Then load them.", "octave packages") == []


def test_abstaining_correctly_gives_no_answer_of_its_own():
    passages = ["Hotel costs are reimbursed up to 120 euros per night."]
    assert scoring.abstained_correctly("Your documents don't cover this.", passages)
    assert scoring.abstained_correctly(
        "Your documents don't cover this. The closest passage: Hotel costs are reimbursed up to 120 euros per night.",
        passages,
    )
    free = (
        "Your team's documents don't cover this, so this is a general answer, not from your documents:\n\n"
        "Parental leave in Makassar lasts sixteen weeks and is paid by the regional government."
    )
    assert scoring.abstains(free)
    assert not scoring.abstained_correctly(free, passages)
    assert not scoring.abstained_correctly("Hotels cost 120 euros per night [Document 1].", passages)


def test_the_extractive_fallback_counts_as_abstaining():
    assert scoring.abstains(
        "The documents I found don't answer this directly; the passages I searched are listed below."
    )


def test_support_is_the_share_of_content_words_found_in_the_passages():
    assert (
        scoring.support("Packages install quickly with pkg [Document 1].", ["pkg install installs packages"]) == 3 / 4
    )
    assert scoring.support("", ["anything"]) == 0.0
