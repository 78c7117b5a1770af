"""ZincirSaver and AsyncZincirSaver: LangGraph's ``BaseCheckpointSaver`` on a zincir store.

Both implement every method, sync and async, over the same store operations (the
``langgraph_*`` tables of migration 0009); they differ in how they are opened and fenced
(``with`` or ``async with``). On SQLite the sync ``put``, ``put_writes`` and ``get_tuple``
run on the calling thread, in the store's one writer's transactions (reads on its connection,
between commits), with no event loop; the other sync methods, and every sync method on
PostgreSQL, drive the async store (see ``_bridge``).

Ordering, within one saver: a checkpoint waits for the writes already in progress for its
parent checkpoint (the tasks that produced it), and a task's writes wait for their own
checkpoint's put if it is in progress; each put and each task's writes is one transaction.
So a checkpoint is never durable ahead of the writes it was built from, and writes are
never durable ahead of the checkpoint they belong to: a task whose writes were committed is
not run again on resume.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any, Final, Literal
from uuid import UUID

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..._encryption import Encryption
from ..._errors import InvalidInput, NotJsonSerializable, RecordFormatError
from ..._json import dumps
from ..._validate import check_id, check_lease_ttl, name_problem, shown, utf8
from ...store import (
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    Store,
    ThreadLease,
    as_store,
    new_owner_id,
    open_store,
)
from ...store._langgraph import LangGraphOps
from ._bridge import Blocking, InFlight, LeaseKeeper
from ._serde import ZincirSerializer, is_pickle

__all__ = ["AsyncZincirSaver", "ZincirSaver"]

_PAGE = 100
_MAX_NS_BYTES = 4096
_MAX_PATH_BYTES = 65536
_STRATEGIES = ("keep_latest", "delete")
_CHECKED = 4096  # the most (thread id, namespace) pairs, or ids, a saver remembers as checked
Address = tuple[str, str, str | None]


# -- checking input ---------------------------------------------------------------------


def _thread_id(value: object, what: str = "thread_id") -> str:
    """A thread id as stored: LangGraph allows str, int or UUID; stored as text."""
    if isinstance(value, UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        value = str(value)
    return check_id(value, f"the {what}")


def _namespace(value: object) -> str:
    if value == "":
        return ""
    problem = name_problem("checkpoint_ns", value, max_bytes=_MAX_NS_BYTES)
    if problem is not None:
        raise InvalidInput(problem)
    assert isinstance(value, str)
    return value


def _configurable(config: object) -> Mapping[str, Any]:
    inner = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(inner, Mapping):
        raise InvalidInput(
            'a LangGraph config is {"configurable": {"thread_id": ...}}, not ' + shown(config)
        )
    return inner


def _address(config: object, *, need_id: bool = False) -> Address:
    """(thread id, namespace, checkpoint id or None) of a config."""
    inner = _configurable(config)
    if "thread_id" not in inner:
        raise InvalidInput('the config has no "thread_id" in "configurable"')
    thread = _thread_id(inner["thread_id"])
    ns = _namespace(inner.get("checkpoint_ns") or "")
    checkpoint_id = inner.get("checkpoint_id") or None
    if checkpoint_id is None and need_id:
        raise InvalidInput(f'thread {thread!r}: the config names no "checkpoint_id"')
    if checkpoint_id is not None:
        checkpoint_id = check_id(checkpoint_id, "checkpoint_id")
    return thread, ns, checkpoint_id


def _text(value: object, what: str, max_bytes: int) -> str:
    if type(value) is str and value.isascii() and len(value) <= max_bytes:
        return value  # the common case, decided without encoding
    data = utf8(value) if isinstance(value, str) else None
    if data is None or len(data) > max_bytes:
        raise InvalidInput(f"{what} must be UTF-8 text of at most {max_bytes} bytes")
    assert isinstance(value, str)
    return value


def _metadata_filter(value: object) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidInput(f"filter must be a dict of metadata keys to values, not {shown(value)}")
    dumps(dict(value), what="the metadata filter")  # JSON values only
    return tuple(value.items())


_METADATA_ENCODER = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
)


_EXACT: Final = frozenset({str, int, bool, type(None)})


def _floatless(value: Any) -> bool:
    """Whether ``value`` is dicts (str keys), lists, tuples, str, int, bool and None only,
    none a subclass: what orjson encodes exactly as json's encoder does."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and _floatless(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_floatless(v) for v in value)
    return kind in _EXACT


def _metadata_json(metadata: Mapping[str, Any]) -> str:
    """Metadata as JSON with sorted keys, so that a dict filter matches in any key order."""
    try:
        if _floatless(metadata):
            return orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, RecursionError):
        pass  # an int beyond 64 bits, a lone surrogate, deep nesting: json's way below
    try:
        text = _METADATA_ENCODER.encode(metadata)
    except (TypeError, ValueError, RecursionError) as error:
        raise NotJsonSerializable(
            f"checkpoint metadata must be JSON (str keys, JSON values): {error}"
        ) from None
    if not text.isascii() and utf8(text) is None:
        text = json.dumps(metadata, sort_keys=True, allow_nan=False, separators=(",", ":"))
    return text


def _ids(values: object, what: str) -> list[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
        raise InvalidInput(f"{what} must be a list of ids, not {shown(values)}")
    return [_thread_id(value, what) for value in values]


# -- the saver --------------------------------------------------------------------------


class _ZincirSaverBase(BaseCheckpointSaver[int]):
    """Everything both savers share: the async methods and their blocking twins."""

    def __init__(
        self, store: Store, *, serde: SerializerProtocol | None = None, owns_store: bool = False
    ) -> None:
        super().__init__(serde=serde or ZincirSerializer())
        self.store = as_store(store)
        self._owns_store = owns_store
        self._blocking = Blocking(type(self).__name__)
        self._in_flight = InFlight()
        self._owner = new_owner_id()
        self._leases: dict[str, tuple[ThreadLease, LeaseKeeper]] = {}
        self._checked: dict[tuple[str, str], None] = {}  # (thread id, namespace) seen valid
        self._checked_ids: dict[str, None] = {}  # ids of checkpoints this saver put
        store = self.store
        self._store_here = store if isinstance(store, LangGraphOps) and store.blocking_tx else None

    def _address(self, config: object, *, need_id: bool = False) -> Address:
        """:func:`_address`, remembering the (thread id, namespace) pairs already checked."""
        inner = config.get("configurable") if type(config) is dict else None
        if type(inner) is dict:
            thread, ns = inner.get("thread_id"), inner.get("checkpoint_ns") or ""
            if type(thread) is str and type(ns) is str and (thread, ns) in self._checked:
                checkpoint_id = inner.get("checkpoint_id") or None
                if checkpoint_id is not None:
                    if type(checkpoint_id) is str and checkpoint_id in self._checked_ids:
                        return thread, ns, checkpoint_id
                    return thread, ns, check_id(checkpoint_id, "checkpoint_id")
                if need_id:
                    raise InvalidInput(f'thread {thread!r}: the config names no "checkpoint_id"')
                return thread, ns, None
        address = _address(config, need_id=need_id)
        if type(inner) is dict and type(inner.get("thread_id")) is str:
            if len(self._checked) >= _CHECKED:
                self._checked.clear()
            self._checked[address[0], address[1]] = None
        return address

    # -- values -----------------------------------------------------------------------

    def _dump(self, value: Any, thread: str, label: str, name: object) -> tuple[str, bytes]:
        """``value`` serialized; errors name it as ``thread {thread!r}: {label} {name}``
        (built only on an error)."""
        try:
            type_tag, data = self.serde.dumps_typed(value)
        except NotJsonSerializable as error:
            what = f"thread {thread!r}: {label} {name}"
            raise NotJsonSerializable(f"{what}: {error.detail}") from None
        except (TypeError, ValueError, RecursionError) as error:
            what = f"thread {thread!r}: {label} {name}"
            raise NotJsonSerializable(f"{what} cannot be serialized: {error}") from None
        if type_tag != "json" and is_pickle(type_tag):
            what = f"thread {thread!r}: {label} {name}"
            raise NotJsonSerializable(
                f"{what}: the serializer produced a pickle; zincir never stores one (use "
                "the default ZincirSerializer, or one without a pickle fallback)"
            )
        return type_tag, data if type(data) is bytes else bytes(data)

    def _dump_checkpoint(self, checkpoint: Checkpoint, thread: str) -> tuple[str, bytes]:
        try:
            return self._dump(checkpoint, thread, "checkpoint", checkpoint["id"])
        except NotJsonSerializable:
            for channel, value in checkpoint.get("channel_values", {}).items():
                self._dump(value, thread, "channel", repr(channel))
            raise

    def _load(self, type_tag: str, data: bytes) -> Any:
        if is_pickle(type_tag):
            raise RecordFormatError(
                "a stored value is a pickle; zincir never unpickles (it could run any code)"
            )
        return self.serde.loads_typed((type_tag, data))

    def _tuple(self, row: GraphCheckpointRow, config: RunnableConfig | None) -> CheckpointTuple:
        ids = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
        parent: RunnableConfig | None = None
        if row.parent_checkpoint_id is not None:
            parent = {"configurable": {**ids, "checkpoint_id": row.parent_checkpoint_id}}
        return CheckpointTuple(
            config=config or {"configurable": {**ids, "checkpoint_id": row.checkpoint_id}},
            checkpoint=self._load(row.type, row.checkpoint),
            metadata=json.loads(row.metadata_json),
            parent_config=parent,
            pending_writes=[
                (w.task_id, w.channel, self._load(w.type, w.value)) for w in row.writes
            ],
        )

    def _lease(self, thread: str) -> ThreadLease | None:
        held = self._leases.get(thread)
        return None if held is None else held[0]

    def _held_leases(self) -> tuple[ThreadLease, ...]:
        return tuple(lease for lease, _ in self._leases.values())

    # -- async methods ----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the thread's newest in its namespace."""
        thread, ns, checkpoint_id = self._address(config)
        row = await self.store.get_graph_checkpoint(thread, ns, checkpoint_id)
        if row is None:
            return None
        return self._tuple(row, config if checkpoint_id is not None else None)

    def _query(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> GraphCheckpointQuery:
        query = GraphCheckpointQuery(metadata=_metadata_filter(filter))
        if config is not None:
            inner = _configurable(config)
            thread, _, checkpoint_id = _address(config)
            ns = inner.get("checkpoint_ns")
            query = replace(
                query,
                thread_id=thread,
                checkpoint_ns=None if ns is None else _namespace(ns),
                checkpoint_id=checkpoint_id,
            )
        if before is not None:
            before_id = _configurable(before).get("checkpoint_id")
            if not before_id:
                raise InvalidInput('before must be a config with a "checkpoint_id"')
            query = replace(query, before_id=check_id(before_id, "the before checkpoint_id"))
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidInput(f"limit must be None or an int >= 0, not {shown(limit)}")
        return replace(query, limit=limit)

    @staticmethod
    def _next_page(
        query: GraphCheckpointQuery, rows: Sequence[GraphCheckpointRow], remaining: int | None
    ) -> tuple[GraphCheckpointQuery | None, int | None]:
        """The query of the page after ``rows`` (None: the listing is complete)."""
        if remaining is not None:
            remaining -= len(rows)
        if not rows or len(rows) < (query.limit or 0) or remaining == 0:
            return None, remaining
        last = rows[-1]
        after = (last.checkpoint_id, last.thread_id, last.checkpoint_ns)
        size = _PAGE if remaining is None else min(_PAGE, remaining)
        return replace(query, after=after, limit=size), remaining

    def _first_page(self, query: GraphCheckpointQuery) -> GraphCheckpointQuery | None:
        if query.limit == 0:
            return None
        return replace(query, limit=_PAGE if query.limit is None else min(_PAGE, query.limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first: of the config's thread (and namespace, if it names
        one), whose metadata matches ``filter``, older than ``before``, at most ``limit``."""
        query = self._query(config, filter, before, limit)
        remaining, page = query.limit, self._first_page(query)
        while page is not None:
            rows = await self.store.list_graph_checkpoints(page)
            for row in rows:
                yield self._tuple(row, None)
            page, remaining = self._next_page(page, rows, remaining)

    def _put_keys(
        self, config: RunnableConfig, checkpoint: Checkpoint
    ) -> tuple[tuple[str, ...], str | None, tuple[str, ...] | None]:
        """A put's in-flight key, its parent's id, and the key of the writes it waits for
        (its parent's)."""
        thread, ns, parent_id = self._address(config)
        if not isinstance(checkpoint, Mapping) or "id" not in checkpoint:
            raise InvalidInput(f"thread {thread!r}: a checkpoint is a dict with an id")
        checkpoint_id = check_id(checkpoint["id"], "the checkpoint id")
        if len(self._checked_ids) >= _CHECKED:
            self._checked_ids.clear()
        self._checked_ids[checkpoint_id] = None
        waits = None
        if parent_id is not None and parent_id != checkpoint_id:
            waits = ("writes", thread, ns, parent_id)
        return ("put", thread, ns, checkpoint_id), parent_id, waits

    def _checkpoint_params(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        key: tuple[str, ...],
        parent_id: str | None,
    ) -> tuple[Any, ...]:
        """The checkpoint a put stores, in ``langgraph_checkpoints`` column order
        (``checkpoint_params``; ``key``, ``parent_id``: from :meth:`_put_keys`)."""
        _, thread, ns, checkpoint_id = key
        if type(metadata) is not dict and not isinstance(metadata, Mapping):
            raise InvalidInput(f"thread {thread!r}: checkpoint metadata must be a dict")
        type_tag, blob = self._dump_checkpoint(checkpoint, thread)
        meta = get_serializable_checkpoint_metadata(config, metadata)
        run_id = meta.get("run_id")
        if not (type(run_id) is str and run_id):
            run_id = None
        return (thread, ns, checkpoint_id, parent_id, run_id, type_tag, blob, _metadata_json(meta))

    @staticmethod
    def _stored_config(config: RunnableConfig, key: tuple[str, ...]) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": config["configurable"]["thread_id"],
                "checkpoint_ns": key[2],
                "checkpoint_id": key[3],
            }
        }

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (after the writes of its parent's tasks) in one transaction."""
        key, parent_id, parent_writes = self._put_keys(config, checkpoint)
        running = self._in_flight.begin(key)
        try:
            params = self._checkpoint_params(config, checkpoint, metadata, key, parent_id)
            if parent_writes is not None:
                await self._in_flight.wait(parent_writes)
            await self.store.put_graph_checkpoint_params(params, lease=self._lease(key[1]))
        except BaseException as error:
            self._in_flight.end(key, running, error)
            raise
        self._in_flight.end(key, running, None)
        return self._stored_config(config, key)

    def _writes_key(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[tuple[str, ...], str, str] | None:
        """A task's writes checked: (their in-flight key, task id, task path); None: none."""
        thread, ns, checkpoint_id = self._address(config, need_id=True)
        assert checkpoint_id is not None
        task = check_id(task_id, "the task_id")
        path = _text(task_path, "task_path", _MAX_PATH_BYTES)
        if type(writes) is not list and (
            isinstance(writes, str | bytes) or not isinstance(writes, Sequence)
        ):
            raise InvalidInput(f"writes must be a list of (channel, value), not {shown(writes)}")
        if not writes:
            return None
        return ("writes", thread, ns, checkpoint_id), task, path

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store one task's writes to a checkpoint in one transaction. A write at a stored
        (task, position) is kept; one to a special channel (an error, an interrupt)
        replaces the stored one."""
        checked = self._writes_key(config, writes, task_id, task_path)
        if checked is None:
            return
        key, task, path = checked
        _, thread, ns, checkpoint_id = key
        running = self._in_flight.begin(key)
        try:
            items = [self._write_item(thread, task, path, idx, w) for idx, w in enumerate(writes)]
            await self._in_flight.wait(("put", thread, ns, checkpoint_id))
            await self.store.put_graph_writes(
                thread, ns, checkpoint_id, items, lease=self._lease(thread)
            )
        except BaseException as error:
            self._in_flight.end(key, running, error)
            raise
        self._in_flight.end(key, running, None)

    def _write_values(
        self, thread: str, task: str, path: str, idx: int, write: object
    ) -> tuple[str, int, str, str, bytes, str]:
        """A write checked and serialized: (task id, idx, channel, type, value, task path)."""
        if (type(write) is not tuple and not isinstance(write, tuple | list)) or len(write) != 2:
            raise InvalidInput(f"thread {thread!r}: write {idx} must be a (channel, value) pair")
        channel = _text(write[0], "a channel name", _MAX_NS_BYTES)
        type_tag, data = self._dump(write[1], thread, "write to", repr(channel))
        return task, WRITES_IDX_MAP.get(channel, idx), channel, type_tag, data, path

    def _write_item(self, thread: str, task: str, path: str, idx: int, write: object) -> GraphWrite:
        return GraphWrite(*self._write_values(thread, task, path, idx, write))

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace."""
        thread = _thread_id(thread_id)
        await self.store.delete_graph_thread(thread, lease=self._lease(thread))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that runs ``run_ids`` created."""
        runs = _ids(run_ids, "run id")
        await self.store.delete_graph_runs(runs, leases=self._held_leases())

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to a new thread (one without any)."""
        source = _thread_id(source_thread_id, "source thread id")
        target = _thread_id(target_thread_id, "target thread id")
        await self.store.copy_graph_thread(source, target, lease=self._lease(target))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (and the ancestors its
        delta channels replay from); ``delete``: delete the threads."""
        if strategy not in _STRATEGIES:
            raise InvalidInput(f"strategy must be 'keep_latest' or 'delete', not {shown(strategy)}")
        threads = _ids(thread_ids, "thread id")
        await self.store.prune_graph_threads(
            threads, keep_latest=strategy == "keep_latest", leases=self._held_leases()
        )

    # -- blocking methods -------------------------------------------------------------

    def _here(self) -> LangGraphOps | None:
        """The store, when it runs the saver's transactions on the calling thread (SQLite);
        None: go through the store's async API (``_bridge``)."""
        store = self._store_here
        if store is not None:
            self._blocking.check_open()
        return store

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Blocking :meth:`aget_tuple`."""
        store = self._here()
        if store is None:
            return self._blocking.run_elsewhere(self.aget_tuple(config))
        thread, ns, checkpoint_id = self._address(config)
        row = store.get_graph_checkpoint_here(thread, ns, checkpoint_id)
        if row is None:
            return None
        return self._tuple(row, config if checkpoint_id is not None else None)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Blocking :meth:`alist`."""
        query = self._query(config, filter, before, limit)
        return self._iterate(query)

    def _iterate(self, query: GraphCheckpointQuery) -> Iterator[CheckpointTuple]:
        remaining, page = query.limit, self._first_page(query)
        while page is not None:
            rows = self._blocking.run_elsewhere(self.store.list_graph_checkpoints(page))
            for row in rows:
                yield self._tuple(row, None)
            page, remaining = self._next_page(page, rows, remaining)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Blocking :meth:`aput`."""
        store = self._here()
        if store is None:
            return self._blocking.run(self.aput(config, checkpoint, metadata, new_versions))
        key, parent_id, parent_writes = self._put_keys(config, checkpoint)
        running = self._in_flight.begin(key)
        try:
            # Wait before serializing: serializing meanwhile would hold the GIL that the
            # writes' thread needs back from SQLite, and delay the writes it waits for.
            if parent_writes is not None:
                self._in_flight.wait_here(parent_writes)
            params = self._checkpoint_params(config, checkpoint, metadata, key, parent_id)
            store.put_graph_checkpoint_params_here(params, lease=self._lease(key[1]))
        except BaseException as error:
            self._in_flight.end(key, running, error)
            raise
        self._in_flight.end(key, running, None)
        return self._stored_config(config, key)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Blocking :meth:`aput_writes`."""
        store = self._here()
        if store is None:
            self._blocking.run(self.aput_writes(config, writes, task_id, task_path))
            return
        checked = self._writes_key(config, writes, task_id, task_path)
        if checked is None:
            return
        key, task, path = checked
        _, thread, ns, checkpoint_id = key
        running = self._in_flight.begin(key)
        try:
            kept: list[tuple[Any, ...]] = []
            replacing: list[tuple[Any, ...]] = []
            for idx, write in enumerate(writes):
                row = (
                    thread,
                    ns,
                    checkpoint_id,
                    *self._write_values(thread, task, path, idx, write),
                )
                (replacing if row[4] < 0 else kept).append(row)
            self._in_flight.wait_here(("put", thread, ns, checkpoint_id))
            store.put_graph_write_rows_here(thread, kept, replacing, lease=self._lease(thread))
        except BaseException as error:
            self._in_flight.end(key, running, error)
            raise
        self._in_flight.end(key, running, None)

    def delete_thread(self, thread_id: str) -> None:
        """Blocking :meth:`adelete_thread`."""
        self._blocking.run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Blocking :meth:`adelete_for_runs`."""
        self._blocking.run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Blocking :meth:`acopy_thread`."""
        self._blocking.run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Blocking :meth:`aprune`."""
        self._blocking.run(self.aprune(thread_ids, strategy=strategy))

    # -- fencing ----------------------------------------------------------------------

    async def _take(self, thread_id: object, ttl: timedelta | float, force: bool) -> ThreadLease:
        thread = _thread_id(thread_id)
        duration = check_lease_ttl(ttl)
        if thread in self._leases:
            raise InvalidInput(f"this saver already holds thread {thread!r}'s lease")
        lease = await self.store.acquire_thread_lease(
            thread, owner=self._owner, ttl=duration, force=bool(force)
        )
        keeper = LeaseKeeper(
            self._blocking,
            lambda: self.store.renew_thread_lease(lease),
            interval=duration.total_seconds() / 3,
            name=f"zincir-lease:{thread}",
        )
        self._leases[thread] = (lease, keeper)
        return lease

    async def _give_back(self, lease: ThreadLease) -> None:
        held = self._leases.pop(lease.thread_id, None)
        if held is not None:
            await asyncio.to_thread(held[1].stop)
        await self.store.release_thread_lease(lease)

    async def _give_back_all(self) -> None:
        """Release the leases still held (a saver closed inside ``fenced``)."""
        for lease, _ in list(self._leases.values()):
            await self._give_back(lease)


def _open(
    path_or_url: str | os.PathLike[str],
    synchronous: Literal["full", "normal"],
    encryption: Encryption | None = None,
) -> Store:
    target = os.fspath(path_or_url) if isinstance(path_or_url, os.PathLike) else path_or_url
    if not isinstance(target, str) or target in ("", ":memory:", "sqlite:///:memory:"):
        raise InvalidInput(
            "a zincir saver needs a database file (its writer and readers share it), not "
            f"{shown(path_or_url)}; use a path or sqlite:///path"
        )
    return open_store(target, synchronous=synchronous, encryption=encryption)


class ZincirSaver(_ZincirSaverBase):
    """A LangGraph checkpointer on a zincir store, for sync graphs (its async methods work
    too). Open one with :meth:`from_conn_string`, or pass an open store (which the saver
    then leaves open)."""

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        path_or_url: str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        synchronous: Literal["full", "normal"] = "full",
        encryption: Encryption | None = None,
    ) -> Iterator[ZincirSaver]:
        """Open (and migrate) the database at a path or ``sqlite:///path``, sealing its
        checkpoints with ``encryption``'s keys if given; close it after."""
        saver = cls(_open(path_or_url, synchronous, encryption), serde=serde, owns_store=True)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Stop lease renewal and close the store, if the saver opened it."""
        if self._blocking.closed:
            return
        self._blocking.run(self._give_back_all())
        if self._owns_store:
            self._blocking.run(self.store.close())
        self._blocking.close()

    @contextmanager
    def fenced(
        self, thread_id: str, *, ttl: timedelta | float = 30.0, force: bool = False
    ) -> Iterator[ThreadLease]:
        """Hold the thread's lease: until the block ends, every write of this saver to the
        thread carries it, and once another owner takes the thread over (after the lease
        expired, or with ``force``) those writes raise FencedOut and store nothing. Writes
        without the lease are refused (LeaseHeld) while it is live. Renewed every ttl/3."""
        lease = self._blocking.run(self._take(thread_id, ttl, force))
        try:
            yield lease
        finally:
            if self._leases.get(lease.thread_id, (None,))[0] is lease:  # not closed meanwhile
                self._blocking.run(self._give_back(lease))


class AsyncZincirSaver(_ZincirSaverBase):
    """A LangGraph checkpointer on a zincir store, for async graphs (its sync methods work
    from threads that run no event loop). Open one with :meth:`from_conn_string`."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        path_or_url: str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        synchronous: Literal["full", "normal"] = "full",
        encryption: Encryption | None = None,
    ) -> AsyncIterator[AsyncZincirSaver]:
        """Open (and migrate) the database at a path or ``sqlite:///path``, sealing its
        checkpoints with ``encryption``'s keys if given; close it after."""
        store = await asyncio.to_thread(_open, path_or_url, synchronous, encryption)
        saver = cls(store, serde=serde, owns_store=True)
        try:
            yield saver
        finally:
            await saver.aclose()

    async def aclose(self) -> None:
        """Stop lease renewal and close the store, if the saver opened it."""
        if self._blocking.closed:
            return
        await self._give_back_all()
        if self._owns_store:
            await self.store.close()
        await asyncio.to_thread(self._blocking.close)

    @asynccontextmanager
    async def fenced(
        self, thread_id: str, *, ttl: timedelta | float = 30.0, force: bool = False
    ) -> AsyncIterator[ThreadLease]:
        """Hold the thread's lease while the block runs (see :meth:`ZincirSaver.fenced`)."""
        lease = await self._take(thread_id, ttl, force)
        try:
            yield lease
        finally:
            if self._leases.get(lease.thread_id, (None,))[0] is lease:  # not closed meanwhile
                await self._give_back(lease)
