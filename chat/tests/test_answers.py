"""The answer a person gets: honest citations, no loops, the passages' own sentences when a
small model strays, "not in your documents" when nothing retrieved is near enough, and
follow-ups searched with the question they follow. Unit tests of chat.answering, then real
turns (REST, the real database, an OpenAI-compatible server on loopback)."""

import time
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from accounts.tests.factories import make_api_key
from billing.models import CreditHold, CreditLedgerEntry, HoldStatus
from chat import answering
from chat.models import Message
from core.tenancy import account_context

P = SimpleNamespace

RST = """Why does Python use indentation for grouping of statements?
----------------------------------------------------------

Guido van Rossum believes that using indentation for grouping is extremely
elegant and contributes a lot to the clarity of the average Python program.
Most people learn to love this feature after a while.

Occasionally C programmers will encounter a fragment of code like this::

   if (x <= y)
           x++;

Only the ``x++`` statement is executed if the condition is true."""


# --- chat.answering ---------------------------------------------------------------------------


def _stream(guard, text, size=7):
    return "".join(guard.feed(text[i : i + size]) for i in range(0, len(text), size)) + guard.flush()


def test_guard_stops_a_looping_stream_before_a_run_of_words_appears_three_times():
    guard = answering.Guard([])
    out = _stream(guard, "Refunds are possible. " + "The Python logo is trademarked and protected. " * 20)
    words = out.lower().split()
    runs = [tuple(words[i : i + 8]) for i in range(len(words) - 7)]
    assert guard.stopped == "repeat" and max(runs.count(r) for r in runs) <= 2
    assert out.startswith("Refunds are possible. The Python logo")
    strict = answering.Guard([P(text="The Python logo is trademarked and protected.")], strict=True)
    out = _stream(strict, "The Python logo is trademarked. The Python logo is protected. The Python logo is nice.")
    words = out.lower().split()
    assert strict.stopped == "repeat" and "The Python logo is nice" not in out
    assert (
        max(
            [tuple(words[i : i + 4]) for i in range(len(words) - 3)].count(r) for r in [("the", "python", "logo", "is")]
        )
        == 2
    )


def test_loose_guard_lets_a_turn_of_phrase_and_repetitive_code_through():
    guard = answering.Guard([])
    text = (
        "It is in the case of refunds. It is in the case of returns. It is in the case of gifts. "
        "```python\nrule = '" + "carry-over-" * 40 + "'\n```\nDone."
    )
    assert _stream(guard, text) == text and not guard.stopped


def test_a_small_models_answer_ends_after_its_sentence_limit():
    guard = answering.Guard([], by_sentence=True, max_sentences=2, loop_words=4)
    out = _stream(guard, "One is first. Two is second. Three is third. Four is fourth.")
    assert out == "One is first. Two is second. " and guard.stopped == "enough"


def test_loose_guard_releases_words_as_they_come():
    guard = answering.Guard([])
    assert guard.feed("Twenty") == "" and guard.feed("-eight days ") == "Twenty-eight days "


def test_strict_guard_releases_supported_sentences_cited_by_overlap_and_stops_at_an_unsupported_one():
    passages = [P(text="Laptops are given on day one."), P(text="Everyone has twenty-eight days of paid holiday.")]
    guard = answering.Guard(passages, strict=True)
    out = _stream(
        guard,
        "Staff get twenty-eight days of paid holiday [Document 7]. "
        "Bananas grow on enormous tropical plantations everywhere. More text.",
    )
    assert out == "Staff get twenty-eight days of paid holiday [Document 2]. "
    assert guard.stopped == "unsupported"


def test_strict_guard_holds_short_pieces_for_a_sentence_and_refuses_recombined_words():
    passages = [P(text="Everyone at Acme has twenty-eight days of paid holiday a year. Laptops arrive on day one.")]
    guard = answering.Guard(passages, strict=True)
    assert _stream(guard, "The answer: Yes.") == "" and not guard.answered
    guard = answering.Guard(passages, strict=True)
    assert (
        _stream(guard, "The answer:\nEveryone at Acme has twenty-eight days of paid holiday.")
        == "The answer:\nEveryone at Acme has twenty-eight days of paid holiday [Document 1]."
    )
    assert guard.answered
    guard = answering.Guard(passages, strict=True)  # every word is in the passage, the claim is not
    assert _stream(guard, "Laptops have twenty-eight holiday days at Acme.") == ""
    assert guard.stopped == "unsupported" and not guard.answered


def test_strict_guard_refuses_a_first_sentence_about_something_else():
    passages = [P(text="Make a script executable on Unix with chmod. On Windows, associate .py files with Python.")]
    guard = answering.Guard(passages, strict=True, question="And on Windows?")
    assert _stream(guard, "Make a script executable on Unix with chmod.") == "" and guard.stopped == "off_topic"
    guard = answering.Guard(passages, strict=True, question="And on Windows?")
    assert _stream(guard, "On Windows, associate .py files with Python.").startswith("On Windows")


def test_strict_guard_stops_a_number_the_passages_do_not_have():
    """A small model's figures are its least reliable words: a number of two or more digits
    must be in the passages (or the question)."""
    passages = [P(text="Meals are reimbursed up to 45 euros a day. The limit was 12,500 euros in 2024.")]
    guard = answering.Guard(passages, strict=True, question="How much are meals reimbursed?")
    assert (
        _stream(guard, "Meals are reimbursed up to 45 euros a day. The limit was 12,500 euros in 2024.")
        == "Meals are reimbursed up to 45 euros a day [Document 1]. "
        "The limit was 12,500 euros in 2024 [Document 1]."
    )
    guard = answering.Guard(passages, strict=True, question="How much are meals reimbursed?")
    out = _stream(guard, "Meals are reimbursed up to 45 euros a day. The limit was 13,500 euros in 2024.")
    assert out == "Meals are reimbursed up to 45 euros a day [Document 1]. " and guard.stopped == "unsupported"
    # The one seen from outside: a made-up number before words copied from the passages.
    faq = [P(text="How do I iterate over a sequence in reverse order? Use the reversed() built-in function.")]
    guard = answering.Guard(faq, strict=True, question="How do I iterate over a sequence in reverse order?")
    assert _stream(guard, "1923045876 Use the reversed() built-in function to iterate over a sequence.") == ""
    assert guard.stopped == "unsupported" and not guard.answered
    # A number the question gave is fine, and so is a list's single-digit numbering.
    how = [P(text="Use the reversed() built-in function to iterate over a sequence in reverse order.")]
    guard = answering.Guard(how, strict=True, question="Can I go over 20 items backwards?")
    answer = "1. For 20 items, use the reversed() built-in function to iterate over a sequence in reverse order."
    assert _stream(guard, answer) == answer[:-1] + " [Document 1]."


def test_strict_guard_does_not_answer_with_a_question():
    """A small model that echoes a heading or asks back has not answered: the passages do."""
    faq = [P(text="How do I iterate over a sequence in reverse order? Use the reversed() built-in function.")]
    guard = answering.Guard(faq, strict=True, question="How do I go over a sequence backwards?")
    assert _stream(guard, "How do I iterate over a sequence in reverse order [Document 1]?") == ""
    assert guard.stopped == "unsupported" and not guard.answered
    # Nor do blank lines before it reach the answer the passages then give.
    guard = answering.Guard(faq, strict=True, question="How do I go over a sequence backwards?")
    assert _stream(guard, "\n\n::\n\nHow do I iterate over a sequence in reverse order?") == ""
    guard = answering.Guard(faq, strict=True, question="Which function goes over a sequence backwards?")
    assert (
        _stream(guard, "\n\nUse the reversed() built-in function.\n\nIt iterates over a sequence in reverse order.")
        == "Use the reversed() built-in function [Document 1].\n\n"
        "It iterates over a sequence in reverse order [Document 1]."
    )


def test_strict_guard_stops_a_repeated_sentence():
    guard = answering.Guard([P(text="Everyone has twenty-eight days of paid holiday.")], strict=True)
    out = _stream(guard, "Everyone has twenty-eight days. Everyone has twenty-eight days. Again.")
    assert out == "Everyone has twenty-eight days [Document 1]. " and guard.stopped == "repeat"


def test_extractive_answer_quotes_the_sentences_after_the_matching_heading_each_cited():
    passages = [P(text="Unrelated text about installing Python on Windows machines."), P(text=RST)]
    answer = answering.extractive_answer("What is the reason Python uses indentation?", passages)
    assert answer.startswith(
        "Guido van Rossum believes that using indentation for grouping is extremely elegant "
        "and contributes a lot to the clarity of the average Python program [Document 2]."
    )
    assert "Why does Python" not in answer and "[Document 1]" not in answer
    assert "```\nif (x <= y)\n        x++;\n```" in answer  # code stays code
    assert "`x++`" in answer and "``" not in answer.replace("```", "")


def test_extractive_answer_leaves_out_what_was_already_said():
    passages = [
        P(text="Everyone has twenty-eight days of paid holiday a year. Unused holiday carries over until March.")
    ]
    full = answering.extractive_answer("How much paid holiday do we get?", passages)
    assert full.startswith("Everyone has twenty-eight days") and "carries over" in full
    rest = answering.extractive_answer(
        "How much paid holiday do we get?",
        passages,
        said="Everyone has twenty-eight days of paid holiday [Document 1].",
    )
    assert rest == "Unused holiday carries over until March [Document 1]."
    other = [P(text="Paid holiday for contractors is agreed per contract.")] + passages
    assert "contract" in answering.extractive_answer("How much paid holiday do we get?", other)
    assert (
        answering.extractive_answer(
            "How much paid holiday do we get?",
            other,
            within=2,
            said="Everyone has twenty-eight days of paid holiday [Document 2].",
        )
        == "Unused holiday carries over until March [Document 2]."
    )


def test_relevance_adds_similarity_and_topic_coverage():
    hits = [P(similarity=0.3)]
    assert answering.relevance("refund policy", hits, [P(text="Our refund policy: 30 days.")]) == pytest.approx(0.65)
    assert answering.relevance("refund policy", hits, [P(text="Laptops on day one.")]) == pytest.approx(0.3)
    assert answering.relevance("refund policy", [], []) == 0.0


# --- real turns -------------------------------------------------------------------------------


@pytest.fixture
def api(account_a):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(account_a)}")
    return client


def _ask(api, message, **extra):
    response = api.post("/api/v1/chat/", {"message": message, **extra}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_citations_list_only_valid_cited_sources_and_none_when_nothing_is_cited(api, account_a, handbook, fake_llm):
    fake_llm.answer = "Twenty-eight days [Document 1], see also [Document 9]."
    body = _ask(api, "How many days of holiday do we get?")
    assert [c["n"] for c in body["citations"]] == [1]
    fake_llm.answer = "Twenty-eight days."
    body = _ask(api, "How many days of holiday do we get?")
    assert body["citations"] == []
    with account_context(account_a):
        stored = Message.objects.for_account(account_a).get(pk=body["message_id"])
        assert stored.citations == [] and stored.sources  # retrieved, not cited


@pytest.mark.django_db(transaction=True)
def test_a_degenerating_answer_is_stopped_at_once_and_only_what_was_generated_is_charged(
    api, account_a, handbook, fake_llm
):
    fake_llm.backend.chunk_delay = 0.01
    fake_llm.answer = "Holiday is twenty-eight days [Document 1]. " + "The holiday policy is generous. " * 60
    body = _ask(api, "How many days of holiday do we get?")
    words = body["answer"].lower().split()
    runs = [tuple(words[i : i + 8]) for i in range(len(words) - 7)]
    assert max(runs.count(r) for r in runs) <= 2
    for _ in range(50):  # the provider saw the client leave: generation stopped early
        if fake_llm.streams and fake_llm.streams[-1]["client_left"]:
            break
        time.sleep(0.1)
    stream = fake_llm.streams[-1]
    assert stream["client_left"] and len(stream["sent_at"]) < 60  # of 300 words
    with account_context(account_a):
        stored = Message.objects.for_account(account_a).get(pk=body["message_id"])
        charge = CreditLedgerEntry.objects.for_account(account_a).get(reference=f"message:{stored.pk}")
        assert -charge.delta == stored.total_tokens == body["usage"]["total_tokens"]
        # Charged for what was generated: far less than the whole scripted answer.
        assert stored.completion_tokens < 200
        assert not CreditHold.objects.for_account(account_a).filter(status=HoldStatus.OPEN).exists()


@pytest.mark.django_db(transaction=True)
def test_small_profile_answers_from_the_passages_when_the_model_strays(api, account_a, handbook, fake_llm, settings):
    settings.CHAT_PROFILE = "small"
    fake_llm.answer = "Bananas grow on enormous tropical plantations in faraway countries."
    body = _ask(api, "How many days of paid holiday does everyone get?")
    assert "twenty-eight days of paid holiday" in body["answer"] and "Bananas" not in body["answer"]
    assert "[Document 1]" in body["answer"] and [c["n"] for c in body["citations"]] == [1]
    request = fake_llm.requests_to("/v1/chat/completions")[-1]
    assert request["max_tokens"] == 200 and request["frequency_penalty"] == 0.3
    assert request["messages"][-1]["content"].count("<document_chunk ") <= 3


@pytest.mark.django_db(transaction=True)
def test_small_profile_keeps_a_supported_model_answer_and_cites_it(api, account_a, handbook, fake_llm, settings):
    settings.CHAT_PROFILE = "small"
    fake_llm.answer = "Everyone at Acme has twenty-eight days of paid holiday a year."
    body = _ask(api, "How much paid holiday do we get?")
    assert body["answer"] == "Everyone at Acme has twenty-eight days of paid holiday a year [Document 1]."
    assert [c["n"] for c in body["citations"]] == [1]


@pytest.mark.django_db(transaction=True)
def test_small_profile_completes_a_one_sentence_answer_with_the_passages(api, account_a, handbook, fake_llm, settings):
    """The model's first sentence holds, its second strays: the answer keeps the first and
    the passages' own sentences say the rest, without repeating it."""
    settings.CHAT_PROFILE = "small"
    fake_llm.answer = "Everyone at Acme gets paid holiday. Bananas grow on enormous tropical plantations."
    body = _ask(api, "How many days of paid holiday does everyone get?")
    assert body["answer"].startswith("Everyone at Acme gets paid holiday [Document 1]. ")
    assert "twenty-eight days of paid holiday" in body["answer"] and "Bananas" not in body["answer"]
    assert [c["n"] for c in body["citations"]] == [1]


@pytest.mark.django_db(transaction=True)
def test_nothing_near_enough_answers_generally_and_says_so(api, account_a, handbook, fake_llm, settings):
    settings.RAG_MIN_RELEVANCE = 5.0
    fake_llm.answer = "A linked list is a chain of nodes [Document 1]."
    body = _ask(api, "What is a linked list?")
    assert body["answer"].startswith("Your team's documents don't cover this")
    assert body["citations"] == []  # no sources, so even a stray marker cites nothing


@pytest.mark.django_db(transaction=True)
def test_a_followup_is_searched_with_the_question_before_it(api, account_a, handbook, fake_llm, settings):
    settings.CHAT_PROFILE = "small"  # the deterministic rewrite
    first = _ask(api, "How many days of holiday does everyone get?")
    fake_llm.clear()
    _ask(api, "And does it carry over?", conversation_id=first["conversation_id"])
    searched = fake_llm.requests_to("/v1/embeddings")[-1]["input"][0]
    assert searched == "And does it carry over? How many days of holiday does everyone get?"
    with account_context(account_a):
        question = Message.objects.for_account(account_a).filter(role="user").latest("pk")
        assert question.query == searched


@pytest.mark.django_db(transaction=True)
def test_a_capable_model_rewrites_the_followup_and_the_rewrite_is_paid_for(api, account_a, handbook, fake_llm):
    def answer(messages):
        if "standalone search query" in messages[0]["content"]:
            return "Does unused holiday carry over?"
        return "Yes, until March [Document 1]."

    first = _ask(api, "How many days of holiday does everyone get?")
    fake_llm.answer = answer
    fake_llm.clear()
    body = _ask(api, "And does it carry over?", conversation_id=first["conversation_id"])
    assert fake_llm.requests_to("/v1/embeddings")[-1]["input"][0] == "Does unused holiday carry over?"
    assert body["answer"] == "Yes, until March [Document 1]."
    with account_context(account_a):
        rewrite = CreditLedgerEntry.objects.for_account(account_a).filter(idempotency_key__endswith=":rewrite")
        assert rewrite.count() == 1 and rewrite.get().kind == "chat" and rewrite.get().delta < 0


# --- never made up: abstention when the model is not marked capable --------------------------


@pytest.mark.django_db(transaction=True)
def test_a_small_model_abstains_with_the_closest_passages_and_no_model_call(
    api, account_a, handbook, fake_llm, settings
):
    """The bundled small models are not trusted with general knowledge: a question the
    documents do not answer gets "Your documents don't cover this." and the nearest passages
    as sources, the model is not called, and only the query embedding is charged."""
    settings.CHAT_PROFILE, settings.RAG_MIN_RELEVANCE = "small", 5.0
    fake_llm.answer = "The capital city of Australia is Sydney."
    fake_llm.clear()
    body = _ask(api, "Which paid holiday does the capital of Australia have?")
    assert body["answer"].startswith("Your documents don't cover this.") and "Sydney" not in body["answer"]
    assert body["citations"] == [] and not fake_llm.requests_to("/v1/chat/completions")
    with account_context(account_a):
        stored = Message.objects.for_account(account_a).get(pk=body["message_id"])
        assert [s["n"] for s in stored.sources] and stored.sources[0]["document_name"] == "handbook.md"
        ledger = CreditLedgerEntry.objects.for_account(account_a)
        assert not ledger.filter(kind="chat").exists() and stored.credits_charged == 0
        assert ledger.filter(kind="embedding", idempotency_key__startswith="chat:").exists()
        assert not CreditHold.objects.for_account(account_a).filter(status=HoldStatus.OPEN).exists()


@pytest.mark.django_db(transaction=True)
def test_general_answers_follow_the_operators_setting(api, account_a, handbook, fake_llm, settings):
    settings.RAG_MIN_RELEVANCE = 5.0
    fake_llm.answer = "Canberra is the capital of Australia."
    settings.CHAT_GENERAL_ANSWERS = False  # a provider model the operator does not trust
    assert _ask(api, "What is the capital of Australia?")["answer"].startswith("Your documents don't cover this.")
    settings.CHAT_PROFILE, settings.CHAT_GENERAL_ANSWERS = "small", True  # marked capable: answered, marked
    body = _ask(api, "What is the capital of Australia?")
    assert body["answer"].startswith("Your team's documents don't cover this") and "Canberra" in body["answer"]
