"""Content stored once: what both backends make of an operation's input and record.

An ``operations`` row keeps its input in one of two forms. A short input, with no piece
(see :mod:`zincir._pieces`), stays whole in ``input_json`` and its record whole in
``record``, as before. Otherwise ``input_json`` is empty, ``input_parts`` holds the input's
description (its last node and the literal after it), the pieces and nodes are rows of
``content`` (digest, body), each referred to by the runs that use it in ``content_refs``
(run, digest), and ``record`` holds the canonical record with ``null`` for its input.
Every read composes both back: the exact input, and the canonical record text that
``decode_record`` checks against its digest.

A content row is written once per store (``ON CONFLICT DO NOTHING``) and a reference once
per run. A store remembers, per run, the digests it committed, so a turn writes only the
pieces its input added. Pruning a run deletes its references and each content row no
other run refers to (:data:`SWEEP_RUN_CONTENT`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._errors import StoreError
from .._json import encode_part
from .._pieces import InputLayout, compose, layout, parse_description
from ..contract._codec import INPUT_LEFT_OUT, record_input_removed, record_with_input
from ._operation_records import NewOperation, OperationOutcome

__all__ = [
    "CONVERT_BATCH",
    "READ_INDEX",
    "SWEEP_RUN_CONTENT",
    "ContentIndex",
    "InputPlan",
    "StoredOperation",
    "compose_read_rows",
    "convert_row",
    "convert_stored_row",
    "read_columns",
    "stored_record",
]

SWEEP_RUN_CONTENT: Final = (
    "DELETE FROM content WHERE hash IN (SELECT mine.hash FROM content_refs AS mine "
    "WHERE mine.run_id = {param} AND NOT EXISTS (SELECT 1 FROM content_refs AS other "
    "WHERE other.hash = mine.hash AND other.run_id <> mine.run_id))"
)
"""Deletes the content a run refers to that no other run does (format ``param`` with the
backend's placeholder); run before the run's ``content_refs`` rows are deleted."""
CONVERT_BATCH: Final = 200
"""Rows of the former format converted per transaction by the migration."""
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


@dataclass(frozen=True, slots=True)
class StoredOperation:
    """A converted row of the former format: its new column values and content rows."""

    input_json: str
    input_parts: str | None
    record: str | None
    rows: tuple[tuple[str, str], ...]


def stored_record(operation: NewOperation, outcome: OperationOutcome, plan: InputPlan) -> str:
    """The ``record`` column of ``outcome``: its canonical text with ``null`` for an input
    stored in pieces, whole for a short input kept in ``input_json``."""
    if plan.input_parts is None:
        if outcome.input_left_out:
            return record_with_input(outcome.record_json, operation.input_json)
        return outcome.record_json
    if outcome.input_left_out:
        return outcome.record_json
    return record_input_removed(outcome.record_json)


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

    def plan(self, operation: NewOperation) -> InputPlan:
        """How ``operation``'s input is written, given what its run already stored."""
        key = operation.key
        found = layout(operation.input_json, (key.run_id, key.step_id, operation.kind))
        if not found.pieces:
            return InputPlan(operation.input_json, None, (), ())
        with self._lock:
            known = self._known.get(key.run_id, set())
        start = self._first_unknown(found, known)
        rows: list[tuple[str, str]] = []
        for piece in found.pieces[start:]:
            if piece.node in known:
                continue
            if piece.digest not in known:
                rows.append((piece.digest, found.text[piece.start : piece.end]))
            rows.append((piece.node, piece.node_text))
        return InputPlan("", found.description(), tuple(rows), tuple(d for d, _ in rows))

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
        run_id: str | None = None,
    ) -> str | None:
        """The canonical record text of a row, its input put back."""
        if record is None or INPUT_LEFT_OUT not in record:
            return record  # written whole, before content was stored once
        whole = self.compose_input(input_json, input_parts, read, run_id)
        encoded = None if input_parts is None else self._encoded(input_parts, whole, read, run_id)
        return record_with_input(record, whole, encoded)

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


def read_columns(columns: str, has_content: bool) -> str:
    """``columns`` (a select list of ``operations``) and the stored input's columns that
    :func:`compose_read_rows` needs (a schema without content has no ``input_parts``)."""
    parts = "input_parts" if has_content else "NULL"
    return f"{columns}, input_json AS zincir_input_text, {parts} AS zincir_input_parts"


def compose_read_rows(
    rows: list[dict[str, object]], read: Callable[[Sequence[str]], Mapping[str, str]]
) -> list[dict[str, object]]:
    """Rows selected with :func:`read_columns`, their input and record composed whole (in
    place): a read-only view shows what ``Store.get_operation`` returns."""
    for row in rows:
        if "zincir_input_text" not in row:
            continue
        text = row.pop("zincir_input_text")
        parts = row.pop("zincir_input_parts", None)
        record = row.get("record")
        stripped = isinstance(record, str) and INPUT_LEFT_OUT in record
        if parts is None and not stripped:
            continue
        run_id = row.get("run_id")
        whole = READ_INDEX.compose_input(
            str(text or ""),
            None if parts is None else str(parts),
            read,
            run_id if isinstance(run_id, str) else None,
        )
        if "input_json" in row:
            row["input_json"] = whole
        if stripped:
            row["record"] = record_with_input(str(record), whole)
    return rows
