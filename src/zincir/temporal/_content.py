"""Content references: large inputs and records travel through Temporal by digest.

An invocation input longer than a threshold (:data:`OFFLOAD_ABOVE`) is written, before its
workflow starts, to a zincir store that the runtime and its workers both reach (PostgreSQL
for several machines), in the pieces the store keeps anyway (``zincir._pieces``), referred
to by its run so ``zincir prune`` removes it with the run. Temporal then carries a *proxy*
invocation, same identity, whose handler id is marked (:data:`PROXY_PREFIX`) and whose input
is a small :class:`ContentRef` (the input's ``sha256:`` digest, its size and its
description: the last node of its pieces). The worker's activity composes the input back and
checks it against the digest before the handler runs (a worker older than this finds no
handler for the marked id: the workflow fails closed, without a record). A record longer
than the threshold comes back the same way, as ``content:`` and a reference, when the
runtime asked for it. The workflow only ever holds references: it needs no I/O, so it
stays deterministic. A workflow history then holds a few hundred bytes per large payload.

Why references in zincir's own invocation rather than a Temporal ``PayloadCodec``: a codec
sees bytes without the run they belong to, so it could not record ``content_refs`` (a
prune would leak or delete content), could not name the run in an error, and would need
every client and worker rebuilt with a data converter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from .._errors import ContentMissing, InvalidInput, InvalidPayload, RecordFormatError
from .._validate import name_problem, utf8_size
from ..contract import Invocation, Outcome, Record, decode_record, encode_record
from ..durable._operations import new_operation
from ..store._content import ContentIndex
from ._wire import record_wire

__all__ = [
    "OFFLOAD_ABOVE",
    "PROXY_PREFIX",
    "WIRE_PREFIX",
    "ContentRef",
    "ContentStore",
    "ContentWriter",
    "can_proxy",
    "content_store_of",
    "is_proxy",
    "offloaded_record_wire",
    "proxy_of",
    "read_record_wire",
    "read_text",
    "rebind",
    "resolve_input",
]

OFFLOAD_ABOVE: Final = 64 * 1024
"""Inputs and record texts longer than this (characters) travel as content references."""

WIRE_PREFIX: Final = "content:"
"""A record's wire text that is a reference: this prefix, then a :class:`ContentRef`."""

PROXY_PREFIX: Final = "zincir.ref:"
"""The handler id of a proxy invocation starts with this (reserved: no handler id may)."""

_KEY: Final = "zincir_content"
_MAX_PARTS: Final = 4096  # a description longer than this is replaced by one whole piece


@runtime_checkable
class ContentStore(Protocol):
    """A zincir store's content by digest (both backends implement it)."""

    async def put_content(self, run_id: str, items: Sequence[tuple[str, str]]) -> None: ...

    async def read_content(self, digests: Sequence[str]) -> Mapping[str, str]: ...

    async def compose_content(self, description: str, *, run_id: str | None = None) -> str: ...


def content_store_of(value: object, what: str) -> ContentStore:
    """``value`` (a zincir store) as a :class:`ContentStore`, else InvalidInput."""
    if not isinstance(value, ContentStore):
        raise InvalidInput(
            f"{what} must be a zincir store (open_store) that keeps content by digest, not "
            f"{type(value).__name__}"
        )
    return value


@dataclass(frozen=True, slots=True)
class ContentRef:
    """A text kept in the store: its ``sha256:`` digest, UTF-8 size and description."""

    sha256: str
    size: int
    parts: str

    def to_json(self) -> str:
        """The reference as one canonical JSON object (the proxy input's text)."""
        body = {"bytes": self.size, "parts": self.parts, "sha256": self.sha256}
        return json.dumps({_KEY: body}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> ContentRef | None:
        """The reference in ``text``, or None when it is not one."""
        try:
            value = json.loads(text)
        except ValueError:
            return None
        body = value.get(_KEY) if isinstance(value, dict) and len(value) == 1 else None
        if not isinstance(body, dict):
            return None
        sha, size, parts = body.get("sha256"), body.get("bytes"), body.get("parts")
        if not (
            isinstance(sha, str)
            and sha.startswith("sha256:")
            and isinstance(size, int)
            and not isinstance(size, bool)
            and isinstance(parts, str)
        ):
            return None
        return cls(sha, size, parts)


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _whole(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``text`` as one piece: its description and its content row."""
    hexdigest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return json.dumps([{"p": hexdigest}]), ((hexdigest, text),)


class ContentWriter:
    """The runtime's side: writes a run's large inputs and remembers what it wrote, so a
    conversation's next request writes only the pieces it added."""

    def __init__(self, store: ContentStore) -> None:
        self.store = store
        self._index = ContentIndex()

    async def put_input(self, invocation: Invocation) -> ContentRef:
        """Store ``invocation``'s input (references first) and return its reference."""
        digest = invocation.input_digest()
        plan = self._index.plan(new_operation(invocation, digest))
        parts, rows = plan.input_parts, plan.rows
        if parts is None or len(parts) > _MAX_PARTS:
            parts, rows = _whole(invocation.input_json)
            await self.store.put_content(invocation.run_id, rows)
        else:
            await self.store.put_content(invocation.run_id, rows)
            self._index.committed(invocation.run_id, (plan,))
        return ContentRef(digest, utf8_size(invocation.input_json) or 0, parts)

    def forget(self, run_id: str) -> None:
        """The run's content may be gone (pruned): write it whole next time."""
        self._index.forget((run_id,))


def can_proxy(invocation: Invocation) -> bool:
    """Whether the marked handler id of ``invocation``'s proxy is a valid id."""
    return name_problem("handler_id", PROXY_PREFIX + invocation.handler_id) is None


def is_proxy(invocation: Invocation) -> bool:
    """Whether ``invocation`` is a proxy (its input a reference, its handler id marked)."""
    return invocation.handler_id.startswith(PROXY_PREFIX)


def proxy_of(invocation: Invocation, ref: ContentRef) -> Invocation:
    """The invocation Temporal carries: the same identity, a marked handler id (a worker
    that cannot read references finds no handler for it) and the reference as its input."""
    return Invocation(
        invocation.run_id,
        invocation.step_id,
        invocation.sequence,
        invocation.kind,
        PROXY_PREFIX + invocation.handler_id,
        ref.to_json(),
    )


def rebind(invocation: Invocation, record: Record) -> Record:
    """``record`` bound to ``invocation`` when it is the record of its proxy (the outcome is
    the handler's, the input the real one); any other record is returned unchanged."""
    stored = record.invocation
    if stored == invocation or stored.stable_key() != invocation.stable_key():
        return record
    if (stored.kind, stored.handler_id) != (invocation.kind, PROXY_PREFIX + invocation.handler_id):
        return record
    ref = ContentRef.parse(stored.input_json)
    if ref is None or ref.sha256 != invocation.input_digest():
        return record
    return Record.for_invocation(invocation, record.outcome)


_AGAIN: Final = (
    "the worker and the TemporalRuntime must use the same store (content_store=), and a "
    "run's content is removed when the run is pruned; execute the operation again to write "
    "it anew"
)


async def _compose(
    store: ContentStore, ref: ContentRef, *, run_id: str, what: str, advice: str
) -> str:
    """The text ``ref`` stands for, unchecked (the store's content cache keeps a
    conversation's earlier pieces, so its next request reads only what it added)."""
    try:
        return await store.compose_content(ref.parts, run_id=run_id)
    except ContentMissing as error:
        problem = f"the content of {what} is not in the store ({error.detail})"
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        problem = f"the stored content of {what} is malformed ({type(error).__name__}: {error})"
    raise ContentMissing(f"{problem}: {advice}", run_id=run_id)


def _mismatch(ref: ContentRef, *, run_id: str, what: str, advice: str) -> ContentMissing:
    return ContentMissing(
        f"the content stored for {what} does not match its digest {ref.sha256} (the store "
        f"was changed outside zincir): {advice}",
        run_id=run_id,
    )


async def read_text(
    store: ContentStore, ref: ContentRef, *, run_id: str, what: str, advice: str = _AGAIN
) -> str:
    """The text ``ref`` stands for, checked against its digest."""
    text = await _compose(store, ref, run_id=run_id, what=what, advice=advice)
    if _digest(text) != ref.sha256:
        raise _mismatch(ref, run_id=run_id, what=what, advice=advice)
    return text


async def resolve_input(store: ContentStore | None, proxy: Invocation) -> Invocation:
    """The real invocation behind a proxy (the activity's side), its input checked."""
    ref = ContentRef.parse(proxy.input_json)
    what = f"the input of {proxy.stable_key()}"
    if ref is None:
        raise ContentMissing(
            f"{what} was sent as a content reference but is not one (handler ids starting "
            f"with {PROXY_PREFIX!r} are reserved for references)",
            run_id=proxy.run_id,
        )
    if store is None:
        raise ContentMissing(
            f"{what} travels as a content reference ({ref.sha256}, {ref.size} bytes) but "
            "this worker has no store to read it from: pass content_store= (the store the "
            "TemporalRuntime writes to) to zincir.temporal.Worker",
            run_id=proxy.run_id,
        )
    text = await _compose(store, ref, run_id=proxy.run_id, what=what, advice=_AGAIN)
    handler_id = proxy.handler_id.removeprefix(PROXY_PREFIX)
    real = Invocation(proxy.run_id, proxy.step_id, proxy.sequence, proxy.kind, handler_id, text)
    # the digest of the step's previous input continues here: only the new text is hashed
    if real.input_digest() != ref.sha256:
        raise _mismatch(ref, run_id=proxy.run_id, what=what, advice=_AGAIN)
    return real


async def offloaded_record_wire(
    store: ContentStore | None,
    invocation: Invocation,
    outcome: Outcome,
    *,
    max_record_bytes: int,
    above: int | None,
) -> str:
    """The wire text of ``invocation``'s record: a reference to it in the store when its
    text is longer than ``above`` (the runtime reads the store), else :func:`record_wire`."""
    if store is None or above is None:
        return record_wire(invocation, outcome, max_record_bytes=max_record_bytes)
    try:
        text = encode_record(Record.for_invocation(invocation, outcome))
    except RecordFormatError:
        return record_wire(invocation, outcome, max_record_bytes=max_record_bytes)
    size = utf8_size(text) or 0
    if len(text) <= above or size > max_record_bytes:
        return record_wire(invocation, outcome, max_record_bytes=max_record_bytes)
    parts, rows = _whole(text)
    await store.put_content(invocation.run_id, rows)
    ref = ContentRef("sha256:" + rows[0][0], size, parts)
    return WIRE_PREFIX + ref.to_json()


async def read_record_wire(
    store: ContentStore | None, wire: str, *, run_id: str, what: str, limit: int
) -> Record:
    """The record a ``content:`` wire text refers to (the runtime's side)."""
    ref = ContentRef.parse(wire[len(WIRE_PREFIX) :])
    if ref is None:
        raise InvalidPayload(f"{what} returned a malformed content reference", run_id=run_id)
    if ref.size > limit:
        raise InvalidPayload(
            f"{what} returned a record of {ref.size} bytes, over the limit of {limit}",
            run_id=run_id,
        )
    if store is None:
        raise ContentMissing(
            f"{what} returned its record as a content reference ({ref.sha256}) but this "
            "TemporalRuntime has no store to read it from: pass content_store=, the store "
            "its workers write to",
            run_id=run_id,
        )
    advice = (
        "the workers must write to this runtime's content_store; if the run was pruned "
        "while Temporal still holds the workflow, delete the workflow (or wait for the "
        "namespace's retention) and execute again"
    )
    text = await read_text(store, ref, run_id=run_id, what=f"the record of {what}", advice=advice)
    return decode_record(text)
