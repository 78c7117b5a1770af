"""Encryption at rest: the keys a user holds (:class:`Encryption`) and the sealing of one
stored value with them (:class:`Sealer`), AES-256-GCM from the ``cryptography`` package.

A sealed value is an envelope: ``zs1``, the key id's length and the key id (clear, and
authenticated with the value), a random 96-bit nonce, then the ciphertext and its tag. The
plaintext starts with one byte saying whether it was text or bytes and whether it was
compressed (text of 1 KiB or more is, before sealing: ciphertext does not compress).
SQLite stores the envelope as a BLOB; PostgreSQL's text columns as ``zs1:`` and the
envelope in base64, its ``bytea`` columns as the envelope. A sealed value is not bound to
its row: whoever can write the database can move one sealed value to another row; no one
without a key can read or alter one unnoticed.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ._errors import EncryptionKeyMissing, InvalidInput, PayloadTampered

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEYS_ENV",
    "MAGIC",
    "SEALED",
    "TEXT_PREFIX",
    "Encryption",
    "Sealer",
    "key_id_of",
    "resolve_encryption",
]

MAGIC: Final = b"zs1"
"""The first bytes of every sealed value (and of its base64 form's text: ``zs1:``)."""
TEXT_PREFIX: Final = "zs1:"
KEYS_ENV: Final = "ZINCIR_ENCRYPTION_KEYS"
"""The environment variable :meth:`Encryption.from_env` reads by default."""
SEALED: Final = "\u2039sealed\u203a"
"""What a reader without the key shows in place of a sealed value."""

_KEY_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
_NONCE: Final = 12
_TAG: Final = 16
_TEXT, _TEXT_ZLIB, _BYTES = b"\x00", b"\x01", b"\x02"
_COMPRESS_FROM: Final = 1024


def _aesgcm() -> type[AESGCM]:
    """AES-GCM from ``cryptography`` (the ``crypto`` extra), or a clear InvalidInput."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as error:
        raise InvalidInput(
            f"encryption at rest needs the cryptography package ({error}); install zincir[crypto]"
        ) from None
    return AESGCM


class Encryption:
    """The keys that seal and open a store's payloads: ``keys`` maps a key id to its 32
    bytes (AES-256); ``active`` seals every new value, and any listed key opens.

    Keys never appear in a repr, an error or the log: only their ids do.
    """

    __slots__ = ("_keys", "active")

    def __init__(self, keys: Mapping[str, bytes], active: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise InvalidInput("Encryption takes keys={key_id: 32 key bytes, ...}, at least one")
        checked: dict[str, bytes] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise InvalidInput(
                    f"key id {key_id!r} is not 1 to 64 letters, digits, '.', '_' or '-'"
                )
            if not isinstance(key, bytes | bytearray) or len(key) != 32:
                size = f"{len(key)} bytes" if isinstance(key, bytes | bytearray) else "not bytes"
                raise InvalidInput(
                    f"key {key_id!r} is {size}; AES-256 takes 32 random bytes "
                    "(zincir.Encryption.generate_key() makes one)"
                )
            checked[key_id] = bytes(key)
        if active not in checked:
            raise InvalidInput(
                f"the active key {active!r} is not among the keys given ({sorted(checked)})"
            )
        self._keys = checked
        self.active = active

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the keys given, sorted."""
        return tuple(sorted(self._keys))

    def key(self, key_id: str) -> bytes | None:
        """The key named ``key_id``, or None."""
        return self._keys.get(key_id)

    def __repr__(self) -> str:
        return f"Encryption(key_ids={list(self.key_ids)!r}, active={self.active!r})"

    @staticmethod
    def generate_key() -> bytes:
        """32 random bytes from the operating system: a new AES-256 key."""
        return os.urandom(32)

    @classmethod
    def from_json(cls, text: str, *, active: str | None = None, source: str = "keys") -> Encryption:
        """Keys written as JSON: ``{"active": ID, "keys": {ID: base64 key, ...}}``;
        ``active`` overrides the text's."""
        try:
            data = json.loads(text)
        except ValueError:
            raise InvalidInput(
                f'{source} is not JSON; write {{"active": ID, "keys": {{ID: base64}}}} '
                "(zincir keys new makes one)"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
            raise InvalidInput(f'{source} has no "keys" object of key id to base64 key')
        keys: dict[str, bytes] = {}
        for key_id, encoded in data["keys"].items():
            try:
                keys[key_id] = base64.b64decode(str(encoded), validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInput(f"key {key_id!r} in {source} is not base64") from None
        chosen = active if active is not None else data.get("active")
        if not isinstance(chosen, str):
            raise InvalidInput(f'{source} names no "active" key id')
        return cls(keys, chosen)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, active: str | None = None) -> Encryption:
        """Keys from a JSON key file (see :meth:`from_json`)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidInput(f"cannot read the key file {os.fspath(path)!r}: {error}") from None
        return cls.from_json(text, active=active, source=f"the key file {os.fspath(path)!r}")

    @classmethod
    def from_env(cls, name: str = KEYS_ENV, *, active: str | None = None) -> Encryption:
        """Keys from an environment variable holding the key file's JSON."""
        text = os.environ.get(name)
        if not text:
            raise InvalidInput(f"the environment variable {name} holding the keys is not set")
        return cls.from_json(text, active=active, source=f"${name}")

    def to_json(self) -> str:
        """The keys as a key file's JSON text (what :meth:`from_json` reads)."""
        keys = {k: base64.b64encode(v).decode("ascii") for k, v in sorted(self._keys.items())}
        return json.dumps({"active": self.active, "keys": keys}, indent=2) + "\n"


def resolve_encryption(encryption: object) -> Encryption | None:
    """A store's keys: ``encryption``, else those in ``$ZINCIR_ENCRYPTION_KEYS`` when it is
    set, else None. InvalidInput for anything but an :class:`Encryption` or None."""
    if encryption is None:
        return Encryption.from_env() if os.environ.get(KEYS_ENV) else None
    if not isinstance(encryption, Encryption):
        raise InvalidInput(
            "encryption takes zincir.Encryption(keys={key_id: key_bytes}, active=key_id), "
            f"not {type(encryption).__name__}"
        )
    return encryption


def key_id_of(value: object) -> str | None:
    """The id of the key that sealed ``value``, or None for a plain (unsealed) value."""
    envelope = _envelope(value)
    if envelope is None or len(envelope) < 4:
        return None
    size = envelope[3]
    return envelope[4 : 4 + size].decode("ascii", "replace")


def _envelope(value: object) -> bytes | None:
    """The envelope bytes of a sealed value as stored, or None for a plain value."""
    if isinstance(value, str):
        if not value.startswith(TEXT_PREFIX):
            return None
        try:
            return base64.b64decode(value[len(TEXT_PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            return b""  # sealed in form, damaged in content
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, bytes) and value.startswith(MAGIC):
        return value
    return None


class Sealer:
    """Seals and opens stored values with an :class:`Encryption`'s keys.

    ``text`` (PostgreSQL) stores sealed text as ``zs1:`` + base64, so a text column keeps
    text; SQLite stores every sealed value as a BLOB. ``plain_ok`` opens a plain value as
    itself (a database being sealed by ``zincir reencrypt``); otherwise a plain value where
    a sealed one belongs is PayloadTampered. Without ``encryption`` the sealer is blind (a
    reader without the key): :meth:`open` gives :data:`SEALED` for every sealed value.
    """

    __slots__ = ("_active_id", "_ciphers", "_header", "encryption", "plain_ok", "text")

    def __init__(
        self, encryption: Encryption | None, *, text: bool, plain_ok: bool = False
    ) -> None:
        self.encryption = encryption
        self.text = text
        self.plain_ok = plain_ok
        self._ciphers: dict[str, AESGCM] = {}
        if encryption is not None:
            aesgcm = _aesgcm()
            for key_id in encryption.key_ids:
                key = encryption.key(key_id)
                assert key is not None
                self._ciphers[key_id] = aesgcm(key)
            self._active_id = encryption.active
            raw = encryption.active.encode("ascii")
            self._header = MAGIC + bytes([len(raw)]) + raw
        else:
            self._active_id = ""
            self._header = b""

    @property
    def blind(self) -> bool:
        """Whether this sealer has no keys (it shows sealed values as :data:`SEALED`)."""
        return self.encryption is None

    def seal(self, value: str | bytes, *, key_id: str | None = None) -> str | bytes:
        """``value`` sealed with the active key (or ``key_id``'s), in its stored form."""
        if self.encryption is None:
            raise EncryptionKeyMissing(
                "this store was opened without keys and cannot write a sealed value; "
                "open it with encryption=zincir.Encryption(...)"
            )
        if key_id is None or key_id == self._active_id:
            header, cipher = self._header, self._ciphers[self._active_id]
        else:
            raw = key_id.encode("ascii")
            header, cipher = MAGIC + bytes([len(raw)]) + raw, self._cipher(key_id, None)
        if isinstance(value, str):
            data = value.encode("utf-8")
            if len(data) >= _COMPRESS_FROM:
                packed = zlib.compress(data, 1)
                plain = _TEXT_ZLIB + packed if len(packed) < len(data) else _TEXT + data
            else:
                plain = _TEXT + data
        else:
            plain = _BYTES + bytes(value)
        nonce = os.urandom(_NONCE)
        envelope = header + nonce + cipher.encrypt(nonce, plain, header)
        if self.text and isinstance(value, str):
            return TEXT_PREFIX + base64.b64encode(envelope).decode("ascii")
        return envelope

    def open(self, value: object, run_id: str | None = None) -> object:
        """``value`` as it was before sealing (None stays None). EncryptionKeyMissing names
        a key not given; PayloadTampered (naming ``run_id``) a value that fails its check."""
        if value is None:
            return None
        envelope = _envelope(value)
        if envelope is None:
            if self.plain_ok or self.encryption is None:
                return value
            raise PayloadTampered(
                "a plain value sits where this encrypted store keeps sealed ones: it was "
                "written without the key, or altered",
                run_id=run_id,
            )
        if len(envelope) < 4 or len(envelope) < 4 + envelope[3] + _NONCE + _TAG + 1:
            raise PayloadTampered("a sealed value is cut short or damaged", run_id=run_id)
        size = envelope[3]
        header_end = 4 + size
        key_id = envelope[4:header_end].decode("ascii", "replace")
        if self.encryption is None:
            return SEALED
        cipher = self._cipher(key_id, run_id)
        nonce = envelope[header_end : header_end + _NONCE]
        try:
            plain = cipher.decrypt(nonce, envelope[header_end + _NONCE :], envelope[:header_end])
        except Exception:  # cryptography's InvalidTag: nothing else is raised for bad bytes
            raise PayloadTampered(
                f"a value sealed with key {key_id!r} failed its authentication: the value was "
                f"altered, or the key given as {key_id!r} is not the one that sealed it",
                run_id=run_id,
            ) from None
        flag, body = plain[:1], plain[1:]
        if flag == _TEXT:
            return body.decode("utf-8")
        if flag == _TEXT_ZLIB:
            return zlib.decompress(body).decode("utf-8")
        return body

    def open_text(self, value: object, run_id: str | None = None) -> str | None:
        """:meth:`open` of a text column: its text (bytes from a blind reader's marker)."""
        opened = self.open(value, run_id)
        if opened is None or isinstance(opened, str):
            return opened
        assert isinstance(opened, bytes), "a stored value is text or bytes"
        return opened.decode("utf-8")

    def _cipher(self, key_id: str, run_id: str | None) -> AESGCM:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            given = ", ".join(sorted(self._ciphers)) or "none"
            raise EncryptionKeyMissing(
                f"a value is sealed with key {key_id!r}, which was not given (keys given: "
                f"{given}); add it to the Encryption's keys (or the --key-file)",
                key_id=key_id,
                run_id=run_id,
            )
        return cipher
