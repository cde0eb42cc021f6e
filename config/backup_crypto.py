"""Encrypted backups (docs/operations/backups.md): `manage.py backup --encrypt KEYFILE` and
`manage.py restore --decrypt KEYFILE`.

The key file holds 32 random bytes in base64 (`openssl rand -base64 32`, or
`manage.py backup --generate-key KEYFILE`). An encrypted archive is the same tar.gz,
sealed with AES-256-GCM in chunks (the STREAM construction):

    header = MAGIC | salt (32 bytes) | key check (16 bytes) | chunk size (4 bytes, big-endian)
    then chunks of `chunk size` plaintext bytes, each followed by its 16-byte tag

The archive's own key and the key check are derived from the key file's key and the salt by
HKDF-SHA256 (a fresh salt per archive, so no two archives share a key and the nonces may
count from zero). Each chunk's nonce is its number (11 bytes) and a last-chunk flag (1 byte);
the header is every chunk's associated data. So a wrong key is told apart by the key check
before anything is decrypted, and a changed byte, a chunk moved, removed or added, a cut-off
end or a changed header fails a tag: the reader raises before handing out bytes it has not
authenticated.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import struct
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAGIC = b"groundwork-backup-aes256gcm-v1\n"
KEY_BYTES = 32
SALT_BYTES = 32
CHECK_BYTES = 16
TAG_BYTES = 16
CHUNK_BYTES = 1 << 20
_HEADER_BYTES = len(MAGIC) + SALT_BYTES + CHECK_BYTES + 4
_MAX_CHUNKS = 1 << 88  # the nonce's counter: 11 bytes
_KEY_HELP = "it must hold 32 random bytes in base64: make one with `manage.py backup --generate-key KEYFILE`"


class EncryptionError(Exception):
    """A key file that cannot be used, a wrong key or an archive that fails authentication."""


def key_read(path: Path) -> bytes:
    """The 32-byte key of a key file (base64, standard or URL-safe; surrounding space ignored)."""
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        raise EncryptionError(f"The key file {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EncryptionError(f"The key file {path} cannot be read ({exc}).") from None
    try:
        key = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionError(f"The key file {path} is not base64: {_KEY_HELP}.") from None
    if len(key) != KEY_BYTES:
        raise EncryptionError(f"The key file {path} holds {len(key)} bytes, not {KEY_BYTES}: {_KEY_HELP}.")
    return key


def key_generate(path: Path) -> None:
    """Write a new random key to `path` (mode 0600); an existing file is never overwritten."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise EncryptionError(f"{path} exists already: a key file is never overwritten.") from None
    except OSError as exc:
        raise EncryptionError(f"Cannot write the key file {path} ({exc}).") from None
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(base64.b64encode(os.urandom(KEY_BYTES)).decode() + "\n")


def is_encrypted(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _derive(key: bytes, salt: bytes) -> tuple[AESGCM, bytes]:
    material = HKDF(
        algorithm=hashes.SHA256(), length=KEY_BYTES + CHECK_BYTES, salt=salt, info=b"groundwork backup archive"
    ).derive(key)
    return AESGCM(material[:KEY_BYTES]), material[KEY_BYTES:]


def _nonce(counter: int, last: bool) -> bytes:
    if counter >= _MAX_CHUNKS:
        raise EncryptionError("The archive is too large to encrypt.")
    return counter.to_bytes(11, "big") + (b"\x01" if last else b"\x00")


class EncryptingWriter:
    """A write-only file object that seals what is written into `sink`. `finish()` writes
    the last chunk; without it the archive is refused as cut off."""

    def __init__(self, sink, key: bytes, *, chunk_bytes: int = CHUNK_BYTES):
        salt = os.urandom(SALT_BYTES)
        self._aead, check = _derive(key, salt)
        self._header = MAGIC + salt + check + struct.pack(">I", chunk_bytes)
        self._sink, self._chunk_bytes = sink, chunk_bytes
        self._buffer = bytearray()
        self._counter = 0
        sink.write(self._header)

    def write(self, data) -> int:
        self._buffer += data
        # Keep at least one byte back: the last chunk is only known at finish().
        while len(self._buffer) > self._chunk_bytes:
            self._seal(bytes(self._buffer[: self._chunk_bytes]), last=False)
            del self._buffer[: self._chunk_bytes]
        return len(data)

    def finish(self) -> None:
        self._seal(bytes(self._buffer), last=True)
        self._buffer.clear()

    def flush(self) -> None:
        self._sink.flush()

    def _seal(self, chunk: bytes, *, last: bool) -> None:
        self._sink.write(self._aead.encrypt(_nonce(self._counter, last), chunk, self._header))
        self._counter += 1


class DecryptingReader:
    """A read-only file object of an encrypted archive's plaintext. Every byte it returns
    was authenticated; `read()` to the end checks the archive was not cut off."""

    def __init__(self, source, key: bytes, *, name: str = "the archive"):
        self._source, self._name = source, name
        header = source.read(_HEADER_BYTES)
        if len(header) < _HEADER_BYTES or not header.startswith(MAGIC):
            raise EncryptionError(f"{name} is not an encrypted Groundwork backup.")
        salt = header[len(MAGIC) : len(MAGIC) + SALT_BYTES]
        check = header[len(MAGIC) + SALT_BYTES : len(MAGIC) + SALT_BYTES + CHECK_BYTES]
        (self._chunk_bytes,) = struct.unpack(">I", header[-4:])
        self._aead, expected = _derive(key, salt)
        if not hmac.compare_digest(check, expected):
            raise EncryptionError(
                f"{name} was not encrypted with this key: give the key file it was made with. Nothing was restored."
            )
        if not 0 < self._chunk_bytes <= 64 * CHUNK_BYTES:
            raise EncryptionError(
                f"{name} is damaged (its header names a chunk of {self._chunk_bytes} bytes). Nothing was restored."
            )
        self._header = header
        self._counter = 0
        self._plain = bytearray()
        self._next = source.read(self._chunk_bytes + TAG_BYTES)
        self._done = False

    def _open_next(self) -> None:
        sealed = self._next
        self._next = self._source.read(self._chunk_bytes + TAG_BYTES)
        last = not self._next
        try:
            self._plain += self._aead.decrypt(_nonce(self._counter, last), sealed, self._header)
        except InvalidTag:
            raise EncryptionError(
                f"{self._name} is damaged or was tampered with (chunk {self._counter + 1} fails "
                "its authentication, or the archive was cut off). Nothing was restored."
            ) from None
        self._counter += 1
        self._done = last

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._plain) < size):
            self._open_next()
        if size < 0:
            size = len(self._plain)
        data = bytes(self._plain[:size])
        del self._plain[:size]
        return data

    def close(self) -> None:
        self._source.close()
