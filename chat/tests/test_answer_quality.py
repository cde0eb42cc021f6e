"""Answers that are never made up and read cleanly: the strict guard's rules for
made-up names, wrong scripts and table-of-contents lines; sentences split where sentences
end; RST directives and repeated labels cleaned; tables answered as tables; follow-ups joined
only when they refer back; the extractive answer streamed a sentence at a time, soon after
the model's first sentence fails."""

import time
from types import SimpleNamespace

import pytest

from chat import answering
from chat.agent import turn_finish, turn_prepare
from chat.router import is_followup, standalone_query
from chat.tests.conftest import HANDBOOK

P = SimpleNamespace
PASSAGES = [
    P(text="Parental leave is sixteen weeks at full pay for every employee of Acme. Requests go to the People team.")
]


def _stream(guard, text, size=7):
    return "".join(guard.feed(text[i : i + size]) for i in range(0, len(text), size)) + guard.flush()


# --- the strict guard -------------------------------------------------------------------------


def test_strict_guard_stops_a_name_found_in_no_passage_nor_the_question():
    guard = answering.Guard(PASSAGES, strict=True, question="How long is parental leave?")
    # Its words and pairs of words are the passage's: only the name is made up.
    out = _stream(
        guard,
        "Parental leave is sixteen weeks at full pay. "
        "Parental leave is sixteen weeks at full pay for every employee of Acme Makassar.",
    )
    assert out == "Parental leave is sixteen weeks at full pay [Document 1]. " and guard.stopped == "unsupported"
    guard = answering.Guard(PASSAGES, strict=True, question="How long is parental leave at Acme?")
    assert "Acme" in _stream(guard, "Parental leave at Acme is sixteen weeks at full pay.")  # a known name


def test_a_chunk_marker_is_never_shown():
    """Qwen 0.5B (a strict profile) cited the element's chunk attribute too: "Yes. [Document 1] [Chunk 0]"."""
    guard = answering.Guard(PASSAGES, strict=True, question="How long is parental leave?")
    out = _stream(guard, "Parental leave is sixteen weeks at full pay [Document 1] [Chunk 0]. ")
    assert "Chunk" not in out and out.startswith("Parental leave is sixteen weeks at full pay [Document 1]")


def test_strict_guard_stops_text_in_a_script_neither_the_question_nor_the_passages_use():
    guard = answering.Guard(PASSAGES, strict=True, question="How long is parental leave?")
    out = _stream(
        guard, "Parental leave is sixteen weeks at full pay. مرحبا بكم في العالم\nRequests go to the People team."
    )
    assert "مرحبا" not in out and guard.stopped == "wrong_script"
    arabic = [P(text="الإجازة الوالدية ستة عشر أسبوعا بأجر كامل لكل موظف")]
    guard = answering.Guard(arabic, strict=True, question="ما مدة الإجازة الوالدية؟")
    assert guard._made_up("الإجازة الوالدية ستة عشر أسبوعا") == ""


def test_strict_guard_never_releases_table_of_contents_or_index_lines():
    toc = [P(text="Installing packages ........ 23\nUsing packages ........ 45\npackages, 45, 67, 89")]
    for line in ("Installing packages ........ 23\n", "packages, 45, 67, 89\n"):
        guard = answering.Guard(toc, strict=True, question="How can I install packages?")
        assert _stream(guard, line + "Installing packages is covered in the manual.") == ""
        assert guard.stopped == "unsupported"


def test_a_sentence_is_not_split_after_an_abbreviation_an_initial_or_inside_a_number():
    passages = [
        P(
            text="Sponsor: Dr. Helen Okafor approves the project budget. Python 3.11 is required, "
            "e.g. for the tests. J. R. Smith reviews it vs. the plan."
        )
    ]
    guard = answering.Guard(passages, strict=True, question="Who approves the project budget?")
    out = _stream(guard, "Sponsor: Dr. Helen Okafor approves the project budget. ", size=3)
    assert out == "Sponsor: Dr. Helen Okafor approves the project budget [Document 1]. "
    quoted = answering.extractive_answer("Who approves the project budget?", passages)
    assert quoted.startswith(
        "Sponsor: Dr. Helen Okafor approves the project budget [Document 1]. "
        "Python 3.11 is required, e.g. for the tests [Document 1]. J. R. Smith"
    )
    assert "Dr [Document" not in quoted and "3 [Document" not in quoted


def test_strict_guard_stops_a_run_of_short_pieces_instead_of_holding_them_to_the_end():
    guard = answering.Guard(PASSAGES, strict=True, question="How long is parental leave?")
    fed = ""
    for _ in range(200):
        fed += guard.feed("[Document 1]\n")
        if guard.stopped:
            break
    assert fed == "" and guard.stopped == "unsupported" and len(guard._pending) < 30


# --- the extractive answer --------------------------------------------------------------------


def test_extractive_answer_leaves_out_tables_of_contents_and_index_pages():
    passages = [
        P(
            text="Contents\n\n1 Introduction ........ 3\n2 Installing packages ........ 23\n"
            "3 Using packages ........ 45"
        ),
        P(text="Index\n\npackages, installing, 23, 24, 31\npackages, loading, 45\n"),
        P(
            text="Installing packages\n===================\n\nPackages are installed with the pkg "
            "install command from a file or from the package site."
        ),
    ]
    answer = answering.extractive_answer("How can I install packages?", passages)
    assert (
        answer == "Packages are installed with the pkg install command from a file or from the package "
        "site [Document 3]."
    )


def test_extractive_answer_cleans_rst_directives_and_repeated_labels():
    passages = [
        P(
            text="A vs B\n------\n\n.. admonition:: A vs B\n   :class: tip\n\n   A copies the list; "
            "B shares it.\n\n.. note::\n\n   Sharing the list saves memory."
        )
    ]
    answer = answering.extractive_answer("What is the difference between A and B?", passages)
    assert answer == "A copies the list; B shares it [Document 1]. Sharing the list saves memory [Document 1]."
    notes = [P(text="# Forklifts\n\nSpeaker notes: Speaker note: mention the forklift recall first.")]
    assert (
        answering.extractive_answer("What about the forklift recall?", notes)
        == "Speaker notes: mention the forklift recall first [Document 1]."
    )


def test_extractive_answer_joins_line_end_hyphenation_of_chunks_parsed_before():
    passages = [P(text="The two copies are identi-\ncal once the sync has finished.")]
    assert (
        answering.extractive_answer("Are the copies identical?", passages)
        == "The two copies are identical once the sync has finished [Document 1]."
    )


def test_extractive_answer_from_a_table_is_its_header_and_the_matching_rows():
    table = (
        "| Site | Pallets | Manager |\n| --- | --- | --- |\n| Leeds | 1200 | Ann Lee |\n"
        "| Bristol | 950 | Bo Ray |\n| Leeds North | 300 | Cy Dee |"
    )
    answer = answering.extractive_answer("How many pallets did Bristol move?", [P(text=table)])
    assert answer == "| Site | Pallets | Manager |\n| --- | --- | --- |\n| Bristol | 950 | Bo Ray |\n\n[Document 1]"
    everything = answering.extractive_answer("Which pallets per site?", [P(text=table)])
    assert everything.count("\n| ") == 4 and everything.endswith("\n\n[Document 1]")


def test_extractive_sentences_come_one_at_a_time():
    passages = [P(text=HANDBOOK)]
    pieces = list(answering.extractive_sentences("How many days of paid holiday do we get?", passages))
    assert pieces == [
        "Everyone at Acme has twenty-eight days of paid holiday a year [Document 1].",
        " Unused holiday carries over until March [Document 1].",
    ]


# --- follow-ups -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "what about its price?",
        "and for Windows?",
        "how do I do that?",
        "On Windows?",
        "How does it work?",
        "Does this apply to contractors?",
    ],
)
def test_a_question_that_refers_back_is_a_followup(question):
    assert is_followup(question)


@pytest.mark.parametrize(
    "question",
    [
        "What is Python?",
        "How do I install add-on packages?",
        "Is there a limit on upload size?",
        "Is it possible to export a conversation?",
        "What is one way to speed up loops?",
        "How do I make sure that the tests run?",
        "For a beginner, what is the best way to learn Python?",
    ],
)
def test_a_full_question_of_its_own_is_searched_alone(question):
    history = [("user", "What is Octave?"), ("assistant", "A language for numerical computing [Document 1].")]
    assert not is_followup(question) and standalone_query(question, history) == question


def test_a_question_after_small_talk_is_searched_alone():
    history = [("user", "hi"), ("assistant", "Hello! Ask me anything about your team's documents.")]
    for question in ("What is the refund policy?", "and for Windows?", "How does it work?"):
        assert standalone_query(question, history) == question


# --- the turn's stream ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_extractive_answer_streams_soon_after_the_models_first_sentence_fails(
    account_a, handbook, fake_llm, settings
):
    """A strict guard stops the model at its first unsupported sentence (the provider sees the
    client leave) and the passages' sentences follow at once, one piece each."""
    settings.CHAT_PROFILE = "small"
    fake_llm.backend.chunk_delay = 0.05
    fake_llm.answer = "Bananas grow on enormous tropical plantations. " + "More words about fruit. " * 40
    turn = turn_prepare(account=account_a, question="How many days of paid holiday does everyone get?")
    started, arrivals = time.monotonic(), []
    for piece in turn.stream():
        arrivals.append((time.monotonic() - started, piece))
    turn_finish(turn)
    assert [p for _, p in arrivals] == [
        "Everyone at Acme has twenty-eight days of paid holiday a year [Document 1].",
        " Unused holiday carries over until March [Document 1].",
    ]
    stream = fake_llm.streams[-1]
    full = len(fake_llm.answer.split(" ")) * fake_llm.backend.chunk_delay  # ~8 s for the whole generation
    assert arrivals[0][0] < full / 4 and len(stream["sent_at"]) < 20


def test_strict_guard_does_not_recite_the_chunks_section_by_section():
    """Found using the product (Qwen2.5-0.5B, a three-section policy): asked about meals, the
    model recited every chunk it was shown, each after its "[Document N]## Heading" line. A
    heading before the answer is left out; a heading after it ends the answer there."""
    policy = [
        P(
            text="## Expenses\nMeals are reimbursed up to 45 euros per day. Receipts must be submitted "
            "within 30 days of the trip through the expense portal."
        ),
        P(text="## Parental leave\nEmployees receive 16 weeks of paid parental leave."),
        P(text="## Travel policy\nEmployees may book economy class for flights under six hours."),
    ]
    recited = (
        "[Document 1]## Expenses\nMeals are reimbursed up to 45 euros per day [Document 1]. "
        "Receipts must be submitted within 30 days of the trip through the expense portal [Document 1].\n\n"
        "[Document 2]## Parental leave\nEmployees receive 16 weeks of paid parental leave [Document 2].\n\n"
        "[Document 3]## Travel policy\nEmployees may book economy class for flights under six hours."
    )
    guard = answering.Guard(policy, strict=True, question="How much are meals reimbursed per day?")
    out = _stream(guard, recited)
    assert "##" not in out and "Parental" not in out and "Travel" not in out, out
    assert out.startswith("Meals are reimbursed up to 45 euros per day [Document 1].")
    assert "expense portal [Document 1]." in out and guard.stopped == "enough"
