"""Content stored once: what both backends make of an operation's input and record.

An ``operations`` row keeps its input in one of two forms. A short input, with no piece
(see :mod:`zincir._pieces`), stays whole in ``input_json``. Otherwise ``input_json`` is
empty, ``input_parts`` holds the input's description (its last node and the literal after
it), and the pieces and nodes are rows of ``content`` (digest, body), each referred to by
the runs that use it in ``content_refs`` (run, digest). Either way ``record`` holds the
canonical record with ``null`` for its input (records written before hold it whole), and
without the identity and input digest its row's columns hold (:data:`IDENTITY_LEFT_OUT`).
A successful record whose output holds a long JSON string (see
:func:`zincir._pieces.text_pieces`) keeps the description of its output instead
(:data:`OUTPUT_PARTS`), the string a piece that the next request's message holding the same
text shares; so does an ``llm_call`` or ``tool_result`` event (:func:`cut_events`). Every
read composes them back: the exact input, the canonical record text that ``decode_record``
checks against its digest, and the payload as appended.

A content row is written once per store (``ON CONFLICT DO NOTHING``) and a reference once
per run. A store remembers, per run, the digests it committed, so a turn writes only the
pieces its input added. Pruning a run deletes its references and each content row no
other run refers to (:data:`SWEEP_RUN_CONTENT`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._errors import ContentMissing, StoreError
from .._json import encode_part
from .._pieces import (
    TEXT_PIECE_MIN_CHARS,
    InputLayout,
    compose,
    layout,
    long_strings,
    parse_description,
    text_pieces,
)
from ..contract._codec import INPUT_LEFT_OUT, record_input_removed, record_with_input
from ._operation_records import NewOperation, OperationOutcome
from ._records import NewEvent

__all__ = [
    "CONVERT_BATCH",
    "CUT_EVENTS",
    "EVENT_PIECES",
    "IDENTITY_LEFT_OUT",
    "OUTPUT_PARTS",
    "READ_INDEX",
    "SWEEP_RUN_CONTENT",
    "ContentIndex",
    "Identity",
    "InputPlan",
    "StoredOperation",
    "compose_read_rows",
    "convert_row",
    "convert_stored_row",
    "cut_events",
    "event_columns",
    "event_payload",
    "event_rows",
    "identity_of",
    "read_columns",
    "record_identity_removed",
    "record_with_identity",
    "record_with_output",
    "stored_record",
    "strict_reader",
]

SWEEP_RUN_CONTENT: Final = (
    "DELETE FROM content WHERE hash IN (SELECT mine.hash FROM content_refs AS mine "
    "WHERE mine.run_id = {param} AND NOT EXISTS (SELECT 1 FROM content_refs AS other "
    "WHERE other.hash = mine.hash AND other.run_id <> mine.run_id))"
)
"""Deletes the content a run refers to that no other run does (format ``param`` with the
backend's placeholder); run before the run's ``content_refs`` rows are deleted."""
IDENTITY_LEFT_OUT: Final = '{"version":1,"invocation":null,"outcome":'
"""How a record stored without its invocation's identity and input digest starts (its row's
columns hold them): a canonical record's invocation is an object, never null."""
Identity = tuple[str, str, int, str, str, str]
"""An operation row's (run id, step id, sequence, kind, handler id, input digest)."""
OUTPUT_PARTS: Final = ',"outcome":{"success":{"output_parts":'
"""Where a stored record holds its output's description instead of ``output_json``: the
quotes are bare, so no encoded string holds this text."""
_OUTPUT_AT: Final = ',"outcome":{"success":{"output_json":'
_RECORD_END: Final = "}}}"
CONVERT_BATCH: Final = 200
"""Rows of the former format converted per transaction by the migration."""
CUT_EVENTS: Final = frozenset({"llm_call", "tool_result"})
"""The event types whose long strings are stored as content: a model's reply and a tool's
result, which the run's next request holds too."""
_CACHED_CHARS: Final = 64 * 1024 * 1024
_EXPANDED_CHARS: Final = 32 * 1024 * 1024
_KNOWN_RUNS: Final = 1024


@dataclass(frozen=True, slots=True)
class InputPlan:
    """How one input is written: the ``input_json`` and ``input_parts`` column values, the
    content rows (digest, body) to insert, and the digests the run then refers to."""

    input_json: str
    input_parts: str | None
    rows: tuple[tuple[str, str], ...]
    digests: tuple[str, ...]
    record: str | None = None
    """The ``record`` column, when the plan was made for an outcome."""


@dataclass(frozen=True, slots=True)
class StoredOperation:
    """A converted row of the former format: its new column values and content rows."""

    input_json: str
    input_parts: str | None
    record: str | None
    rows: tuple[tuple[str, str], ...]


def stored_record(operation: NewOperation, outcome: OperationOutcome, plan: InputPlan) -> str:
    """The ``record`` column of ``outcome``: the one its plan made, else its canonical text
    with ``null`` for its input (kept in ``input_json`` or in pieces), put back on read."""
    if plan.record is not None:
        return plan.record
    if outcome.input_left_out:
        return record_identity_removed(outcome.record_json, identity_of(operation))
    return record_identity_removed(
        record_input_removed(outcome.record_json), identity_of(operation)
    )


def identity_of(operation: NewOperation) -> Identity:
    """The identity columns of ``operation``'s row."""
    key = operation.key
    return (
        key.run_id,
        key.step_id,
        key.sequence,
        operation.kind,
        operation.handler_id,
        operation.input_digest,
    )


def _identity_head(identity: Identity) -> str:
    """The canonical start of a record of ``identity`` whose input is left out, up to its
    outcome."""
    run_id, step_id, sequence, kind, handler_id, digest = identity
    return "".join(
        (
            '{"version":1,"invocation":{"run_id":',
            encode_part(run_id),
            ',"step_id":',
            encode_part(step_id),
            ',"sequence":',
            encode_part(sequence),
            ',"kind":',
            encode_part(kind),
            ',"handler_id":',
            encode_part(handler_id),
            ',"input_json":null},"input_digest":',
            encode_part(digest),
            ',"outcome":',
        )
    )


def record_identity_removed(record: str, identity: Identity) -> str:
    """``record`` (its input left out) without the identity and digest of its row, when it
    has exactly those (a record of another invocation is kept as it came)."""
    head = _identity_head(identity)
    if not record.startswith(head):
        return record
    return IDENTITY_LEFT_OUT + record[len(head) :]


def record_with_identity(record: str, identity: Identity) -> str:
    """``record`` with its row's identity and digest put back (unchanged when it has them)."""
    if not record.startswith(IDENTITY_LEFT_OUT):
        return record
    return _identity_head(identity) + record[len(IDENTITY_LEFT_OUT) :]


def _output_cut(record: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """``record`` (stored form) with its output's description in place of a success's
    output holding a long string, and the strings' rows; None when there is none."""
    at = record.rfind(_OUTPUT_AT)
    if at < 0 or not record.endswith(_RECORD_END):
        return None
    encoded = record[at + len(_OUTPUT_AT) : -len(_RECORD_END)]
    if len(encoded) < TEXT_PIECE_MIN_CHARS:
        return None
    output = json.loads(encoded)
    if not isinstance(output, str) or encode_part(output) != encoded:
        return None  # not canonical: kept as it came
    cut = text_pieces(output)
    if cut is None:
        return None
    return record[:at] + OUTPUT_PARTS + cut[0] + _RECORD_END, cut[1]


def record_with_output(record: str, fetch: Callable[[Iterable[str]], Mapping[str, str]]) -> str:
    """``record`` (stored form) with a success's output put back when it holds its
    description instead (:data:`OUTPUT_PARTS`); unchanged otherwise."""
    at = record.rfind(OUTPUT_PARTS)
    if at < 0:
        return record
    output = compose(record[at + len(OUTPUT_PARTS) : -len(_RECORD_END)], fetch)
    return record[:at] + _OUTPUT_AT + encode_part(output) + _RECORD_END


def convert_row(input_json: str, record: str | None) -> StoredOperation:
    """A row written whole (input and record) in the stored form: one migration step."""
    found = layout(input_json)
    if not found.pieces:
        return StoredOperation(input_json, None, record, ())
    return StoredOperation(
        "",
        found.description(),
        None if record is None else record_input_removed(record),
        tuple(found.all_content()),
    )


def convert_stored_row(
    execute: Callable[[str, tuple[Any, ...]], Any],
    execute_many: Callable[[str, Sequence[tuple[Any, ...]]], Any],
    key: tuple[str, str, int],
    *,
    select: str,
    insert: str,
    refer: str,
    update: str,
) -> int:
    """Convert operation ``key``'s row written whole to the stored form, with the backend's
    statements (``select`` its input and record, ``refer``/``insert`` a reference and a
    piece, ``update`` its columns); 1 when the row changed. References go before pieces,
    as every writer of content does."""
    row = execute(select, key).fetchone()
    if row is None:
        return 0
    stored = convert_row(str(row[0]), None if row[1] is None else str(row[1]))
    if stored.input_parts is None and stored.record == row[1]:
        return 0
    execute_many(refer, [(key[0], digest) for digest, _ in stored.rows])
    execute_many(insert, stored.rows)
    execute(update, (stored.input_json, stored.input_parts, stored.record, *key))
    return 1


def cut_events(
    events: Sequence[NewEvent],
) -> tuple[list[tuple[str, str, str | None, str | None]], list[tuple[str, str]]]:
    """Each event as (type, stored payload, tool call id, ``payload_pieces``), and the
    content rows its long strings become: a stored payload holds ``""`` in a long string's
    place (it stays JSON, its other fields readable by SQL), and ``payload_pieces`` lists
    ``[offset, digest]`` of each such place (None when there is none)."""
    stored: list[tuple[str, str, str | None, str | None]] = []
    rows: list[tuple[str, str]] = []
    for kind, payload, call_id in events:
        found = (
            long_strings(payload)
            if kind in CUT_EVENTS and len(payload) >= TEXT_PIECE_MIN_CHARS
            else ()
        )
        if not found:
            stored.append((kind, payload, call_id, None))
            continue
        parts: list[str] = []
        places: list[list[object]] = []
        at = offset = 0
        for start, end, digest in found:
            parts.append(payload[at:start])
            offset += start - at
            places.append([offset, digest])
            parts.append('""')
            offset += 2
            rows.append((digest, payload[start:end]))
            at = end
        parts.append(payload[at:])
        stored.append((kind, "".join(parts), call_id, encode_part(places)))
    return stored, rows


def event_payload(
    payload: str, pieces: str | None, fetch: Callable[[Iterable[str]], Mapping[str, str]]
) -> str:
    """An event's payload as appended: ``payload`` with the strings ``pieces`` lists put back
    (see :func:`cut_events`)."""
    if pieces is None:
        return payload
    places = json.loads(pieces)
    texts = fetch(digest for _, digest in places)
    parts: list[str] = []
    at = 0
    for offset, digest in places:
        parts.extend((payload[at:offset], texts[digest]))
        at = offset + 2
    parts.append(payload[at:])
    return "".join(parts)


class ContentIndex:
    """A store's memory of its content: the digests committed for each run (so a turn
    writes only what it adds), and a bounded cache of content read back (so composing a
    run's next input reads only its new pieces)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[str, set[str]] = OrderedDict()
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cached_chars = 0
        self._expanded: OrderedDict[str, str] = OrderedDict()
        self._expanded_chars = 0
        self._escapes: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._escaped_chars = 0

    def plan(self, operation: NewOperation, outcome: OperationOutcome | None = None) -> InputPlan:
        """How ``operation``'s input (and ``outcome``'s record) is written, given what its
        run already stored."""
        key = operation.key
        found = layout(operation.input_json, (key.run_id, key.step_id, operation.kind))
        with self._lock:
            known = self._known.get(key.run_id, set())
        rows: list[tuple[str, str]] = []
        if found.pieces:
            for piece in found.pieces[self._first_unknown(found, known) :]:
                if piece.node in known:
                    continue
                rows.extend(row for row in piece.rows(found.text) if row[0] not in known)
            tail = found.tail()
            if tail is not None and tail[0] not in known:
                rows.append(tail)
            stored: tuple[str, str | None] = ("", found.description())
        else:
            stored = (operation.input_json, None)
        record = None
        if outcome is not None:
            record = stored_record(operation, outcome, InputPlan(*stored, (), ()))
            cut = _output_cut(record)
            if cut is not None:
                record = record_identity_removed(cut[0], identity_of(operation))
                rows.extend(row for row in cut[1] if row[0] not in known)
        unique = tuple(dict(rows).items())
        return InputPlan(*stored, unique, tuple(d for d, _ in unique), record)

    @staticmethod
    def _first_unknown(found: InputLayout, known: set[str]) -> int:
        """Where the pieces not yet known to be stored begin: after the reused prefix when
        its last node is known (a node is written only after its predecessors)."""
        reused = found.reused
        if reused and found.pieces[reused - 1].node in known:
            return reused
        return 0

    def committed(self, run_id: str, plans: Iterable[InputPlan]) -> None:
        """The plans' content is committed for ``run_id``."""
        with self._lock:
            known = self._known.get(run_id)
            if known is None:
                known = self._known[run_id] = set()
                while len(self._known) > _KNOWN_RUNS:
                    self._known.popitem(last=False)
            for plan in plans:
                known.update(plan.digests)

    def forget(self, run_ids: Iterable[str]) -> None:
        """The runs were pruned: their content may be gone."""
        with self._lock:
            for run_id in run_ids:
                self._known.pop(run_id, None)

    def fetcher(
        self, read: Callable[[Sequence[str]], Mapping[str, str]], run_id: str | None = None
    ) -> Callable[[Iterable[str]], Mapping[str, str]]:
        """A fetch for :func:`zincir._pieces.compose` that reads through this cache;
        ``read(digests)`` reads the backend's ``content`` rows."""

        def fetch(digests: Iterable[str]) -> Mapping[str, str]:
            wanted = list(digests)
            found: dict[str, str] = {}
            with self._lock:
                for digest in wanted:
                    text = self._cache.get(digest)
                    if text is not None:
                        found[digest] = text
            missing = [digest for digest in wanted if digest not in found]
            if missing:
                read_now = read(missing)
                lost = [digest for digest in missing if digest not in read_now]
                if lost:
                    raise StoreError(
                        f"the stored content {lost[0]} of an operation's input is missing; "
                        "the database was changed outside zincir: restore it from a backup"
                        + ("" if run_id is None else f" (run {run_id})")
                    )
                found.update(read_now)
                self._remember(read_now)
            return found

        return fetch

    def _remember(self, texts: Mapping[str, str]) -> None:
        with self._lock:
            for digest, text in texts.items():
                if digest in self._cache:
                    continue
                self._cache[digest] = text
                self._cached_chars += len(text)
            while self._cached_chars > _CACHED_CHARS and self._cache:
                _, dropped = self._cache.popitem(last=False)
                self._cached_chars -= len(dropped)

    def compose_input(
        self,
        input_json: str,
        input_parts: str | None,
        read: Callable[[Sequence[str]], Mapping[str, str]],
        run_id: str | None = None,
    ) -> str:
        """The exact input of a row (``input_json`` itself when it has no parts)."""
        if input_parts is None:
            return input_json
        return compose(input_parts, self.fetcher(read, run_id), self)

    def get(self, node: str) -> str | None:
        """The text ``node`` stands for, when it was composed lately."""
        with self._lock:
            text = self._expanded.get(node)
            if text is not None:
                self._expanded.move_to_end(node)
            return text

    def put(self, node: str, text: str) -> None:
        """Remember the text ``node`` stands for (the newest few, within a bound)."""
        with self._lock:
            if node in self._expanded:
                return
            self._expanded[node] = text
            self._expanded_chars += len(text)
            while self._expanded_chars > _EXPANDED_CHARS and len(self._expanded) > 1:
                _, dropped = self._expanded.popitem(last=False)
                self._expanded_chars -= len(dropped)

    def compose_record(
        self,
        record: str | None,
        input_json: str,
        input_parts: str | None,
        read: Callable[[Sequence[str]], Mapping[str, str]],
        identity: Identity,
    ) -> str | None:
        """The canonical record text of a row, its identity, input and output put back."""
        if record is None:
            return None
        run_id = identity[0]
        record = record_with_output(
            record_with_identity(record, identity), self.fetcher(read, run_id)
        )
        if INPUT_LEFT_OUT not in record:
            return record  # written whole, before content was stored once
        whole = self.compose_input(input_json, input_parts, read, run_id)
        encoded = None if input_parts is None else self._encoded(input_parts, whole, read, run_id)
        return record_with_input(record, whole, encoded)

    def compose_output(
        self,
        record: str | None,
        read: Callable[[Sequence[str]], Mapping[str, str]],
        identity: Identity,
    ) -> str | None:
        """A row's record with its identity and output put back, its input left as
        stored."""
        if record is None:
            return None
        record = record_with_identity(record, identity)
        if OUTPUT_PARTS not in record:
            return record
        return record_with_output(record, self.fetcher(read, identity[0]))

    def _encoded(
        self,
        input_parts: str,
        whole: str,
        read: Callable[[Sequence[str]], Mapping[str, str]],
        run_id: str | None,
    ) -> str | None:
        """``whole`` (the input ``input_parts`` describes) as a JSON string, its first node's
        part escaped from the newest escaped node of its chain on (the previous request's):
        JSON escapes each character on its own, so escaped parts concatenate."""
        segments = parse_description(input_parts)
        node = segments[0].get("n") if segments and isinstance(segments[0], dict) else None
        prefix = None if node is None else self.get(node)
        if node is None or prefix is None:
            return None
        with self._lock:
            hit = self._escapes.get(node)
        if hit is None:
            fetch = self.fetcher(read, run_id)
            current: str | None = node
            base_length, base = 0, ""
            while current is not None:
                with self._lock:
                    found = self._escapes.get(current)
                if found is not None:
                    base_length, base = found
                    break
                chain = parse_description(fetch((current,))[current])
                first = chain[0] if chain else None
                current = first.get("n") if isinstance(first, dict) else None
            hit = (len(prefix), base + _escaped(prefix[base_length:]))
            with self._lock:
                self._escapes[node] = hit
                self._escaped_chars += len(hit[1])
                while self._escaped_chars > _EXPANDED_CHARS and len(self._escapes) > 1:
                    _, (_, dropped) = self._escapes.popitem(last=False)
                    self._escaped_chars -= len(dropped)
        return '"' + hit[1] + _escaped(whole[hit[0] :]) + '"'


def _escaped(text: str) -> str:
    """``text`` as the inside of a JSON string."""
    return encode_part(text)[1:-1]


READ_INDEX: Final = ContentIndex()
"""The content cache of read-only views (content never changes under its digest)."""


EVENT_PIECES: Final = "events.payload_pieces"
"""Named among a read-only view's tables when its ``events`` have ``payload_pieces``."""


def event_columns(columns: str, tables: frozenset[str]) -> str:
    """``columns`` (a select list of ``events``) and the column :func:`compose_read_rows`
    puts an event's long strings back from (a schema before it has none)."""
    if EVENT_PIECES not in tables:
        return columns
    return f"{columns}, payload_pieces AS zincir_payload_pieces"


def event_rows(
    rows: Iterable[Sequence[Any]],
    read: Callable[[Sequence[str]], Mapping[str, str]],
    run_id: str,
) -> list[tuple[Any, ...]]:
    """``events`` rows selected as (seq, type, payload, created_at, payload_pieces) as
    (seq, type, payload, created_at), payloads composed (their pieces read at once)."""
    found = list(rows)
    fetch = READ_INDEX.fetcher(read, run_id)
    wanted = [digest for row in found if row[4] is not None for _, digest in json.loads(row[4])]
    if wanted:
        fetch(wanted)  # one read for the page; composing then reads the cache
    return [
        (seq, kind, event_payload(payload, pieces, fetch), created)
        for seq, kind, payload, created, pieces in found
    ]


def read_columns(columns: str, has_content: bool) -> str:
    """``columns`` (a select list of ``operations``) and the stored input's columns that
    :func:`compose_read_rows` needs (a schema without content has no ``input_parts``)."""
    parts = "input_parts" if has_content else "NULL"
    identity = ", ".join(f"{column} AS zincir_{column}" for column in _IDENTITY_COLUMNS)
    return f"{columns}, input_json AS zincir_input_text, {parts} AS zincir_input_parts, {identity}"


_IDENTITY_COLUMNS: Final = ("run_id", "step_id", "sequence", "kind", "handler_id", "input_digest")


def compose_read_rows(
    rows: list[dict[str, object]], read: Callable[[Sequence[str]], Mapping[str, str]]
) -> list[dict[str, object]]:
    """Rows selected with :func:`read_columns`, their input and record composed whole (in
    place): a read-only view shows what ``Store.get_operation`` returns."""
    for row in rows:
        if "zincir_payload_pieces" in row:
            pieces = row.pop("zincir_payload_pieces")
            if pieces is not None:
                run_id = row.get("run_id")
                fetch = READ_INDEX.fetcher(read, run_id if isinstance(run_id, str) else None)
                row["payload"] = event_payload(str(row["payload"]), str(pieces), fetch)
            continue
        if "zincir_input_text" not in row:
            continue
        text = row.pop("zincir_input_text")
        parts = row.pop("zincir_input_parts", None)
        found = tuple(row.pop(f"zincir_{column}") for column in _IDENTITY_COLUMNS)
        identity: Identity = (
            str(found[0]),
            str(found[1]),
            int(str(found[2])),
            str(found[3]),
            str(found[4]),
            str(found[5]),
        )
        run_id = identity[0]
        record = row.get("record")
        if isinstance(record, str):
            record = row["record"] = READ_INDEX.compose_output(record, read, identity)
        stripped = isinstance(record, str) and INPUT_LEFT_OUT in record
        if parts is None and not stripped:
            continue
        whole = READ_INDEX.compose_input(
            str(text or ""), None if parts is None else str(parts), read, run_id
        )
        if "input_json" in row:
            row["input_json"] = whole
        if stripped:
            row["record"] = record_with_input(str(record), whole)
    return rows


def strict_reader(
    read: Callable[[Sequence[str]], Mapping[str, str]],
) -> Callable[[Sequence[str]], Mapping[str, str]]:
    """``read`` that raises ContentMissing for a digest it does not find."""

    def strict(digests: Sequence[str]) -> Mapping[str, str]:
        found = read(digests)
        for digest in digests:
            if digest not in found:
                raise ContentMissing(f"the stored content {digest} is missing")
        return found

    return strict
