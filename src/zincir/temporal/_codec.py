"""Encryption on Temporal: a payload codec sealing every payload with a store's keys.

:class:`EncryptionCodec` seals each payload whole (its data and metadata, the serialized
``Payload``) in the envelope a store seals its values in (``zincir._encryption.Sealer``),
so a workflow history holds only ``binary/zincir-sealed`` payloads naming their key id.
:func:`data_converter` adds it to a converter, with failure messages and stack traces moved
into a (sealed) payload; :func:`encrypted_client` gives a client that uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final, Self

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)

from .._encryption import Encryption, Sealer, key_id_of
from .._errors import InvalidInput, PayloadTampered

__all__ = [
    "KEY_ID_METADATA",
    "SEALED_ENCODING",
    "EncryptionCodec",
    "data_converter",
    "encrypted_client",
    "encryption_codec_of",
]

SEALED_ENCODING: Final = b"binary/zincir-sealed"
"""The ``encoding`` metadata of a sealed payload."""
KEY_ID_METADATA: Final = "zincir-key-id"
"""The metadata naming the key that sealed a payload (also inside the envelope, checked)."""


class EncryptionCodec(PayloadCodec):
    """Seals each payload with the active key of ``encryption``; opens with any of its keys.

    A payload without the sealed encoding (history written before encryption) is passed
    through unchanged. Opening raises EncryptionKeyMissing for a key not given and
    PayloadTampered for a payload that fails its authentication.
    """

    def __init__(self, encryption: Encryption) -> None:
        if not isinstance(encryption, Encryption):
            raise InvalidInput(
                "EncryptionCodec takes zincir.Encryption(keys={key_id: key_bytes}, "
                f"active=key_id), not {type(encryption).__name__}"
            )
        self.encryption = encryption
        self._sealer = Sealer(encryption, text=False)
        self._key_id = encryption.active.encode("ascii")

    def __repr__(self) -> str:
        return f"EncryptionCodec({self.encryption!r})"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload serialized and sealed, in a ``binary/zincir-sealed`` payload."""
        return [self._seal(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each sealed payload opened; any other payload as it is."""
        return [self._open(payload) for payload in payloads]

    def _seal(self, payload: Payload) -> Payload:
        sealed = self._sealer.seal(payload.SerializeToString(deterministic=True))
        assert isinstance(sealed, bytes)
        return Payload(
            metadata={"encoding": SEALED_ENCODING, KEY_ID_METADATA: self._key_id}, data=sealed
        )

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != SEALED_ENCODING:
            return payload
        if key_id_of(payload.data) is None:
            raise PayloadTampered(
                "a Temporal payload marked binary/zincir-sealed holds no sealed value: it "
                "was altered"
            )
        opened = self._sealer.open(payload.data)
        assert isinstance(opened, bytes), "a payload is sealed as bytes"
        try:
            return Payload.FromString(opened)
        except DecodeError:  # authenticated, so only a foreign sealer's bytes get here
            raise PayloadTampered(
                "a sealed Temporal payload opened to bytes that are not a payload"
            ) from None


def data_converter(encryption: Encryption, base: DataConverter | None = None) -> DataConverter:
    """``base`` (temporalio's default converter) with payloads sealed by ``encryption`` and
    failure messages and stack traces moved into a sealed payload.

    A codec ``base`` already has runs first on encode (and last on decode).
    """
    codec = EncryptionCodec(encryption)
    base = DataConverter.default if base is None else base
    inner = base.payload_codec
    failures = base.failure_converter_class
    if failures is DefaultFailureConverter:
        failures = DefaultFailureConverterWithEncodedAttributes
    return dataclasses.replace(
        base,
        payload_codec=codec if inner is None else _Chained(inner, codec),
        failure_converter_class=failures,
    )


def encryption_codec_of(converter: DataConverter) -> EncryptionCodec | None:
    """The EncryptionCodec ``converter`` seals with, or None."""
    codec = converter.payload_codec
    if isinstance(codec, _Chained):
        codec = codec.outer
    return codec if isinstance(codec, EncryptionCodec) else None


def encrypted_client(client: Client, encryption: Encryption | None) -> Client:
    """``client``, or (given keys) a client on its connection that seals every payload.

    A client whose converter already seals (``data_converter=data_converter(...)`` at
    connect) is kept as it is.
    """
    if encryption is None or encryption_codec_of(client.data_converter) is not None:
        return client
    config = client.config()
    config["data_converter"] = data_converter(encryption, config["data_converter"])
    return Client(**config)


class _Chained(PayloadCodec, WithSerializationContext):
    """A user's codec, then the encryption codec (sealed outermost)."""

    def __init__(self, inner: PayloadCodec, outer: EncryptionCodec) -> None:
        self.inner = inner
        self.outer = outer

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.outer.encode(await self.inner.encode(payloads))

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.inner.decode(await self.outer.decode(payloads))

    def with_context(self, context: SerializationContext) -> Self:
        """The user's codec given the context, if it takes one."""
        if not isinstance(self.inner, WithSerializationContext):
            return self
        return type(self)(self.inner.with_context(context), self.outer)
