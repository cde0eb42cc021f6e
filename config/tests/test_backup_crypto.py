"""The encrypted archive's format (config/backup_crypto.py) over many chunks: small chunks
here, so chunk boundaries, the last chunk and chunks moved around are all exercised."""

import io
import os

import pytest

from config.backup_crypto import TAG_BYTES, DecryptingReader, EncryptingWriter, EncryptionError

HEADER = len(b"groundwork-backup-aes256gcm-v1\n") + 32 + 16 + 4
CHUNK = 64


def _seal(data: bytes, key: bytes, writes: int = 7) -> bytes:
    sink = io.BytesIO()
    writer = EncryptingWriter(sink, key, chunk_bytes=CHUNK)
    for start in range(0, len(data), writes):
        writer.write(data[start : start + writes])
    writer.finish()
    return sink.getvalue()


def _open(sealed: bytes, key: bytes, size: int = 10) -> bytes:
    reader = DecryptingReader(io.BytesIO(sealed), key)
    out = bytearray()
    while block := reader.read(size):
        out += block
    return bytes(out)


@pytest.mark.parametrize("length", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK, 5 * CHUNK + 17])
def test_any_length_round_trips(length):
    key, data = os.urandom(32), os.urandom(length)
    sealed = _seal(data, key)
    assert _open(sealed, key) == data
    assert DecryptingReader(io.BytesIO(sealed), key).read() == data
    assert data[:8] not in sealed[HEADER:] or length < 8


def test_two_archives_of_the_same_bytes_differ():
    key, data = os.urandom(32), b"same bytes " * 40
    assert _seal(data, key)[HEADER:] != _seal(data, key)[HEADER:]


def test_moved_dropped_or_cut_chunks_are_refused():
    key, data = os.urandom(32), os.urandom(4 * CHUNK + 10)
    sealed = _seal(data, key)
    body = sealed[HEADER:]
    size = CHUNK + TAG_BYTES
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    assert len(chunks) == 5
    header = sealed[:HEADER]
    variants = {
        "swapped": header + chunks[1] + chunks[0] + b"".join(chunks[2:]),
        "dropped": header + chunks[0] + b"".join(chunks[2:]),
        "cut at a chunk": header + b"".join(chunks[:3]),
        "last repeated": sealed + chunks[-1],
        "header changed": header[:-5] + bytes([header[-5] ^ 1]) + header[-4:] + body,
    }
    for variant in variants.values():
        with pytest.raises(EncryptionError, match="damaged|not encrypted with this key"):
            _open(variant, key)


def test_a_wrong_key_is_told_apart_before_anything_is_read():
    sealed = _seal(b"secret", os.urandom(32))
    with pytest.raises(EncryptionError, match="not encrypted with this key"):
        DecryptingReader(io.BytesIO(sealed), os.urandom(32))
