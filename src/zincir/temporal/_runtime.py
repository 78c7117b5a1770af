"""TemporalRuntime: the DurableRuntime contract on a Temporal service."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import EllipsisType
from typing import Any, Final

from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.common import WorkflowIDReusePolicy
from temporalio.converter import WorkflowSerializationContext
from temporalio.exceptions import (
    ApplicationError,
    FailureError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from .._encryption import Encryption, resolve_encryption
from .._errors import (
    ContentMissing,
    DigestMismatch,
    EncryptionKeyMissing,
    InputDrift,
    InvalidInput,
    InvalidInvocation,
    MissingDurableHandler,
    PayloadTampered,
    RecordFormatError,
    StoreError,
    WorkerError,
    ZincirError,
)
from .._json import MAX_DOCUMENT_BYTES
from .._validate import check_count, check_positive_duration
from ..contract import DEFAULT_MAX_INPUT_BYTES, Invocation, OperationKind, Record
from ..durable._registry import HandlerRegistry
from ..durable._retry import RetryPolicy
from ..store import Store, as_store
from ._codec import SEALED_ENCODING, encrypted_client
from ._content import (
    OFFLOAD_ABOVE,
    PROXY_PREFIX,
    WIRE_PREFIX,
    ContentStore,
    ContentWriter,
    can_proxy,
    content_store_of,
    proxy_of,
    read_record_wire,
    rebind,
)
from ._record_store import load_record, save_record
from ._wire import DEFAULT_MAX_RECORD_BYTES, decode_wire
from ._workflow import FAIL_CLOSED, WORKFLOW_NAME

__all__ = ["MAX_START_REQUEST_BYTES", "ActivityTimeouts", "TemporalRuntime", "workflow_id_for"]

DEFAULT_WORKFLOW_ID_PREFIX: Final = "zincir-op-"
MAX_START_REQUEST_BYTES: Final = 2 * 1024 * 1024
"""The cap on a whole workflow start request, as encoded and sent (Temporal's blob limit)."""
_SIZED_ABOVE: Final = 64 * 1024  # smaller inputs cannot encode to anywhere near the cap

_LOOKUP_TIMEOUT: Final = timedelta(seconds=10)
_MEMO_DIGEST: Final = "zincir_input_digest"
_MEMO_KEY: Final = "zincir_stable_key"
_ERRORS: Final[dict[str, type[ZincirError]]] = {
    "ContentMissing": ContentMissing,
    "DigestMismatch": DigestMismatch,
    "InputDrift": InputDrift,
    "MissingDurableHandler": MissingDurableHandler,
    "InvalidInvocation": InvalidInvocation,
}


@dataclass(frozen=True, slots=True, init=False)
class ActivityTimeouts:
    """Timeouts of activity ``zincir.execute.v1`` (a float of seconds is accepted too).

    ``start_to_close`` bounds one attempt; ``heartbeat`` (optional) makes the worker heartbeat
    while the handler runs, so a dead worker is noticed within it and the attempt retried.
    """

    start_to_close: timedelta | None
    schedule_to_close: timedelta | None
    schedule_to_start: timedelta | None
    heartbeat: timedelta | None

    def __init__(
        self,
        start_to_close: timedelta | float | None = timedelta(minutes=10),
        schedule_to_close: timedelta | float | None = None,
        schedule_to_start: timedelta | float | None = None,
        heartbeat: timedelta | float | None = None,
    ) -> None:
        for name, value in (
            ("start_to_close", start_to_close),
            ("schedule_to_close", schedule_to_close),
            ("schedule_to_start", schedule_to_start),
            ("heartbeat", heartbeat),
        ):
            if value is not None:
                value = check_positive_duration(value, f"the {name} timeout")
            object.__setattr__(self, name, value)
        if self.start_to_close is None and self.schedule_to_close is None:
            raise InvalidInput("set start_to_close or schedule_to_close: Temporal needs one")

    def to_options(self) -> dict[str, float | None]:
        """The JSON form the workflow reads (seconds)."""
        return {
            name: None if value is None else value.total_seconds()
            for name, value in (
                ("start_to_close", self.start_to_close),
                ("schedule_to_close", self.schedule_to_close),
                ("schedule_to_start", self.schedule_to_start),
                ("heartbeat", self.heartbeat),
            )
        }


def workflow_id_for(invocation: Invocation, prefix: str = DEFAULT_WORKFLOW_ID_PREFIX) -> str:
    """``prefix`` + the SHA-256 hex of the stable key: fixed length, safe for any id characters."""
    return prefix + hashlib.sha256(invocation.stable_key().encode("utf-8")).hexdigest()


def _retry_options(retry: RetryPolicy | TemporalRetryPolicy) -> dict[str, Any]:
    if isinstance(retry, RetryPolicy):
        return {
            "initial_interval": retry.initial_interval.total_seconds(),
            "backoff": float(retry.backoff),
            "maximum_interval": retry.max_interval.total_seconds(),
            "maximum_attempts": retry.max_attempts,
        }
    if isinstance(retry, TemporalRetryPolicy):
        return {
            "initial_interval": retry.initial_interval.total_seconds(),
            "backoff": float(retry.backoff_coefficient),
            "maximum_interval": None
            if retry.maximum_interval is None
            else retry.maximum_interval.total_seconds(),
            "maximum_attempts": retry.maximum_attempts,
            "non_retryable_error_types": list(retry.non_retryable_error_types or []),
        }
    raise InvalidInput(
        "retry must be a zincir.durable.RetryPolicy or a temporalio.common.RetryPolicy, "
        f"not {type(retry).__name__}"
    )


def _timeouts(
    value: ActivityTimeouts | Mapping[str, Any] | timedelta | float | None,
) -> ActivityTimeouts:
    if value is None:
        return ActivityTimeouts()
    if isinstance(value, ActivityTimeouts):
        return value
    if isinstance(value, Mapping):
        try:
            return ActivityTimeouts(**value)
        except TypeError as error:
            raise InvalidInput(
                f"activity timeouts take start_to_close, schedule_to_close, schedule_to_start "
                f"and heartbeat: {error}"
            ) from None
    return ActivityTimeouts(start_to_close=check_positive_duration(value, "start_to_close"))


def _registrations(items: Iterable[Any]) -> frozenset[tuple[OperationKind, str]]:
    found: set[tuple[OperationKind, str]] = set()
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidInput(f"registrations are (kind, handler_id) pairs, not {item!r}")
        kind, handler_id = item
        try:
            kind = OperationKind(kind)
        except ValueError:
            raise InvalidInput(
                f"unknown operation kind {kind!r}; use one of {[k.value for k in OperationKind]}"
            ) from None
        if not isinstance(handler_id, str) or not handler_id:
            raise InvalidInput(f"handler_id must be a non-empty str, not {handler_id!r}")
        found.add((kind, handler_id))
    return frozenset(found)


class TemporalRuntime:
    """Runs each invocation as workflow ``zincir.operation.v1`` on a Temporal service.

    ``registrations`` lists the (kind, handler_id) pairs the workers of ``task_queue`` serve
    (a ``HandlerRegistry`` works too, read at each call). It is checked before any I/O: an
    unregistered pair raises ``MissingDurableHandler`` at once, with no RPC and no read.
    With ``find_unregistered=True`` it instead returns the record an earlier run stored for
    the identity (in ``record_store``, else in an existing workflow), never starting one, so
    a run that used a since-retired handler still replays. ``retry`` is a zincir
    ``RetryPolicy`` or a temporalio ``RetryPolicy`` for the activity; ``activity_timeouts``
    (alias ``timeouts``) an ``ActivityTimeouts``, a mapping of its fields, or a start-to-close
    duration. With ``record_store`` (a zincir store), every terminal record is also kept in
    its ``operations`` table and read from it before any workflow start, so replay outlives
    Temporal's retention; as with ``LocalRuntime``, only a lease holder writes a run's log:
    when a context of this process holds the run's lease, the record is kept together with
    an ``operation_completed`` event appended under it (FencedOut or RunTerminal, with
    nothing kept, once the run was taken over or finished), else the record alone.

    ``content_store`` is a zincir store the workers reach too (give them the same one,
    ``Worker(content_store=...)``; PostgreSQL across machines; it may be ``record_store``):
    an input or record longer than 64 KiB then travels through Temporal as a reference to
    its content there, so the workflow history holds references and a conversation of
    several MiB runs. Without one, inputs travel whole and ``max_input_bytes`` defaults to
    1 MiB (a Temporal payload holds 2 MiB); with one, to 16 MiB. Either way the whole start
    request, encoded as it is sent (through the client's data converter and codec), must fit
    in 2 MiB (``MAX_START_REQUEST_BYTES``), or ``InvalidInvocation`` is raised and nothing
    is started.

    ``encryption`` (default: the keys in ``$ZINCIR_ENCRYPTION_KEYS`` when it is set) seals
    every payload this runtime sends to Temporal (inputs, memo, and through its workers the
    records and failure messages) with its active key; ``client`` is then replaced by one
    on the same connection whose data converter seals (see ``data_converter``). The workers
    need the same keys.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        registrations: Iterable[tuple[OperationKind | str, str]],
        retry: RetryPolicy | TemporalRetryPolicy | None = None,
        activity_timeouts: ActivityTimeouts | Mapping[str, Any] | timedelta | float | None = None,
        timeouts: ActivityTimeouts | Mapping[str, Any] | timedelta | float | None = None,
        max_input_bytes: int | None | EllipsisType = ...,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        record_store: Store | None = None,
        content_store: Store | None = None,
        workflow_id_prefix: str = DEFAULT_WORKFLOW_ID_PREFIX,
        encryption: Encryption | None = None,
        find_unregistered: bool = False,
    ) -> None:
        if not isinstance(task_queue, str) or not task_queue:
            raise InvalidInput("task_queue must be a non-empty str")
        if (
            not isinstance(workflow_id_prefix, str)
            or not 0 < len(workflow_id_prefix) <= 200
            or not workflow_id_prefix.isprintable()
        ):
            raise InvalidInput(
                f"workflow_id_prefix must be 1-200 printable characters, not {workflow_id_prefix!r}"
            )
        if activity_timeouts is not None and timeouts is not None:
            raise InvalidInput("pass activity_timeouts or timeouts (its alias), not both")
        if record_store is not None:
            as_store(record_store, "record_store")
        self._writer: ContentWriter | None = None
        if content_store is not None:
            store = as_store(content_store, "content_store")
            self._writer = ContentWriter(content_store_of(store, "content_store"))
        if isinstance(max_input_bytes, EllipsisType):
            max_input_bytes = (
                DEFAULT_MAX_INPUT_BYTES if self._writer is None else MAX_DOCUMENT_BYTES
            )
        for name, value in (
            ("max_input_bytes", max_input_bytes),
            ("max_record_bytes", max_record_bytes),
        ):
            if name == "max_input_bytes" and value is None:
                continue
            check_count(value, name, maximum=1 << 40)
        self.client = encrypted_client(client, resolve_encryption(encryption))
        self.task_queue = task_queue
        self.registrations: HandlerRegistry | frozenset[tuple[OperationKind, str]] = (
            registrations
            if isinstance(registrations, HandlerRegistry)
            else _registrations(registrations)
        )
        self.retry = RetryPolicy() if retry is None else retry
        self.timeouts = _timeouts(activity_timeouts if activity_timeouts is not None else timeouts)
        self.max_input_bytes = max_input_bytes
        self.max_record_bytes = max_record_bytes
        self.record_store = record_store
        self.workflow_id_prefix = workflow_id_prefix
        self.find_unregistered = bool(find_unregistered)
        self._options = {
            "version": 1,
            "retry": _retry_options(self.retry),
            "timeouts": self.timeouts.to_options(),
            "max_record_bytes": max_record_bytes,
        }
        if self._writer is not None:
            self._options["offload_above"] = OFFLOAD_ABOVE

    @property
    def content_store(self) -> ContentStore | None:
        """The store large inputs and records travel through (None: they travel whole)."""
        return None if self._writer is None else self._writer.store

    def _registered(self, invocation: Invocation) -> bool:
        return (OperationKind(invocation.kind), invocation.handler_id) in self.registrations

    def workflow_id(self, invocation: Invocation) -> str:
        """The workflow id of an invocation: the prefix and the SHA-256 of its stable key."""
        return workflow_id_for(invocation, self.workflow_id_prefix)

    async def execute(self, invocation: Invocation) -> Record:
        """Run ``invocation`` once and return its persisted record (the stored one on replay)."""
        if not isinstance(invocation, Invocation):
            raise InvalidInvocation(
                f"execute() takes an Invocation, not {type(invocation).__name__}"
            )
        try:
            invocation.validate(self.max_input_bytes)
        except InvalidInvocation as error:
            if self._writer is None and "max_input_bytes" in error.detail:
                raise InvalidInvocation(
                    f"{error.detail}; on Temporal, pass content_store= (a zincir store the "
                    "workers reach too, Worker(content_store=...)) so that large inputs "
                    "travel as references",
                    run_id=invocation.run_id,
                ) from None
            raise
        registered = self._registered(invocation)
        if not registered and not self.find_unregistered:
            raise MissingDurableHandler(
                f"no handler registered for kind {invocation.kind!s} and handler id "
                f"{invocation.handler_id!r}: add it to registrations= and register it with "
                f"the workers of task queue {self.task_queue!r}; no workflow was started and "
                "nothing was read (to replay a record kept for a retired handler, build the "
                "runtime with find_unregistered=True)",
                run_id=invocation.run_id,
            )
        lease = None
        if self.record_store is not None:
            stored = await load_record(self.record_store, invocation)
            if stored is not None:
                return _checked(invocation, stored)
            lease = self.record_store.lease_for(invocation.run_id)
        try:
            found = await self._run_workflow(invocation, start=registered)
        except MissingDurableHandler as error:
            if self._writer is None or PROXY_PREFIX not in error.detail:
                raise
            raise MissingDurableHandler(
                f"{error.detail}; the workers are older than this TemporalRuntime and do not "
                "read content references: upgrade them, or drop content_store=",
                run_id=invocation.run_id,
            ) from None
        except ContentMissing:
            if self._writer is None:
                raise
            # the run's content may have been pruned since this runtime wrote it: once more,
            # every piece written anew (the failed workflow left no record)
            self._writer.forget(invocation.run_id)
            found = await self._run_workflow(invocation, start=registered)
        if found is None:
            raise MissingDurableHandler(
                f"no handler registered for kind {invocation.kind!s} and handler id "
                f"{invocation.handler_id!r} and no record exists (find_unregistered=True "
                "looked for one): add it to registrations= "
                f"and register it with the workers of task queue {self.task_queue!r}; no "
                "workflow was started",
                run_id=invocation.run_id,
            )
        record = _checked(invocation, rebind(invocation, found))
        if self.record_store is not None:
            stored_record = await save_record(self.record_store, record, lease)
            if stored_record is None:
                raise InputDrift(
                    f"identity {invocation.stable_key()} is held in the record store by an "
                    "unfinished operation with different input",
                    run_id=invocation.run_id,
                )
            record = _checked(invocation, stored_record)
        return record

    async def _run_workflow(self, invocation: Invocation, *, start: bool) -> Record | None:
        """The record of the identity's workflow: an existing one's, else (``start``) a new one's.

        Without ``start`` (an unregistered pair) nothing is started and None means no record.
        """
        workflow_id = self.workflow_id(invocation)
        digest = invocation.input_digest()
        for _ in range(3):
            try:
                existing = await self._existing(invocation, workflow_id, start=start)
                if existing is not None:
                    return await self._result(invocation, workflow_id, existing)
                if not start:
                    return None
                return await self._start_or_attach(invocation, workflow_id, digest)
            except RPCError as error:
                if error.status == RPCStatusCode.NOT_FOUND:
                    continue  # deleted between two calls: look again
                if not start:
                    return None
                raise _rpc_error(invocation, self.task_queue, error) from None
            except EncryptionKeyMissing as error:
                raise EncryptionKeyMissing(
                    f"workflow {workflow_id} for {invocation.stable_key()}: {error.detail}",
                    key_id=error.key_id,
                    run_id=invocation.run_id,
                ) from None
            except PayloadTampered as error:
                raise PayloadTampered(
                    f"workflow {workflow_id} for {invocation.stable_key()}: {error.detail}",
                    run_id=invocation.run_id,
                ) from None
            except KeyError as error:  # the SDK's "Unknown payload encoding"
                if SEALED_ENCODING.decode() not in str(error):
                    raise
                raise EncryptionKeyMissing(
                    f"workflow {workflow_id} for {invocation.stable_key()} holds payloads "
                    "sealed by zincir, and this TemporalRuntime has no keys: give it "
                    "encryption=zincir.Encryption(...) (or $ZINCIR_ENCRYPTION_KEYS)",
                    run_id=invocation.run_id,
                ) from None
            except RuntimeError as error:  # the SDK's "Failed client connect"
                if not start:
                    return None
                raise StoreError(
                    f"cannot reach the Temporal service for {invocation.stable_key()}: {error}; "
                    "check the client's address and credentials, then execute again",
                    run_id=invocation.run_id,
                ) from None
        raise StoreError(
            f"workflow {workflow_id} kept disappearing while being read; try again",
            run_id=invocation.run_id,
        )

    async def _existing(
        self, invocation: Invocation, workflow_id: str, *, start: bool
    ) -> WorkflowHandle[Any, str] | None:
        """The workflow holding a record (completed) or making one (running), drift-checked.

        None when there is none, or its last run closed without a record (failed closed,
        terminated, cancelled, timed out): then a new run may start under the same id.
        """
        handle: WorkflowHandle[Any, str] = self.client.get_workflow_handle(
            workflow_id, result_type=str
        )
        try:
            description = await handle.describe(rpc_timeout=None if start else _LOOKUP_TIMEOUT)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if description.status not in (
            WorkflowExecutionStatus.COMPLETED,
            WorkflowExecutionStatus.RUNNING,
        ):
            return None
        await self._check_memo(invocation, workflow_id, description)
        return handle

    async def _start_or_attach(
        self, invocation: Invocation, workflow_id: str, digest: str
    ) -> Record:
        """Start the workflow, or attach to the one holding the id; wait for its record."""
        sent = invocation
        if (
            self._writer is not None
            and len(invocation.input_json) > OFFLOAD_ABOVE
            and can_proxy(invocation)
        ):
            # written before the workflow starts: the worker reads it by its digest
            sent = proxy_of(invocation, await self._writer.put_input(invocation))
        memo = {_MEMO_KEY: invocation.stable_key(), _MEMO_DIGEST: digest}
        if len(sent.input_json) > _SIZED_ABOVE:
            await self._check_start_size(invocation, sent, workflow_id, memo)
        try:
            started: WorkflowHandle[Any, str] = await self.client.start_workflow(
                WORKFLOW_NAME,
                args=[sent.to_dict(), self._options],
                id=workflow_id,
                task_queue=self.task_queue,
                result_type=str,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                memo=memo,
            )
        except WorkflowAlreadyStartedError:
            pass
        else:
            return await self._result(invocation, workflow_id, started)
        handle: WorkflowHandle[Any, str] = self.client.get_workflow_handle(
            workflow_id, result_type=str
        )
        # The stored result (immediate for a closed workflow) is read while the memo is
        # checked, so drift against a running workflow is refused without waiting for it.
        result = asyncio.ensure_future(self._result(invocation, workflow_id, handle))
        try:
            await self._check_memo(invocation, workflow_id, await handle.describe())
        except BaseException:
            result.cancel()
            await asyncio.gather(result, return_exceptions=True)
            raise
        return await result

    async def _start_request_size(
        self, sent: Invocation, workflow_id: str, memo: dict[str, str]
    ) -> int:
        """The bytes of the StartWorkflowExecution request for ``sent``, encoded as the SDK
        encodes it: payloads and memo through the client's data converter (and its codec).

        Headers an interceptor adds (a trace context, some hundred bytes) are not counted.
        """
        converter = self.client.data_converter.with_context(
            WorkflowSerializationContext(namespace=self.client.namespace, workflow_id=workflow_id)
        )
        request = StartWorkflowExecutionRequest(
            namespace=self.client.namespace,
            workflow_id=workflow_id,
            identity=self.client.identity,
            request_id=str(uuid.uuid4()),
            workflow_id_reuse_policy=int(WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY),  # type: ignore[arg-type]
        )
        request.workflow_type.name = WORKFLOW_NAME
        request.task_queue.name = self.task_queue
        request.input.payloads.extend(await converter.encode([sent.to_dict(), self._options]))
        for key, value in memo.items():
            request.memo.fields[key].CopyFrom((await converter.encode([value]))[0])
        return request.ByteSize()

    async def _check_start_size(
        self, invocation: Invocation, sent: Invocation, workflow_id: str, memo: dict[str, str]
    ) -> None:
        """Refuse a start request over ``MAX_START_REQUEST_BYTES`` before it is sent."""
        if getattr(self.client.data_converter, "external_storage", None) is not None:
            return  # the SDK moves large payloads out of the request itself
        size = await self._start_request_size(sent, workflow_id, memo)
        if size <= MAX_START_REQUEST_BYTES:
            return
        if self._writer is None:
            fix = (
                "pass content_store= (a zincir store the workers reach too, "
                "Worker(content_store=...)) so that large inputs travel as references"
            )
        else:
            fix = "make the input smaller (this one cannot travel as a content reference)"
        raise InvalidInvocation(
            f"the workflow start request for {invocation.stable_key()} is {size} bytes as "
            f"encoded, over Temporal's limit of {MAX_START_REQUEST_BYTES} bytes (2 MiB); no "
            f"workflow was started: {fix}",
            run_id=invocation.run_id,
        )

    async def _check_memo(
        self, invocation: Invocation, workflow_id: str, description: WorkflowExecutionDescription
    ) -> None:
        """Refuse drifted input before waiting on a workflow started for other input."""
        memo = await description.memo()
        stored, digest = memo.get(_MEMO_DIGEST), invocation.input_digest()
        if isinstance(stored, str) and stored != digest:
            raise InputDrift(
                f"operation {invocation.stable_key()} was started as workflow {workflow_id} "
                f"with input {stored} but arrived with {digest}; an identity's input never "
                "changes (use a new sequence for new input)",
                run_id=invocation.run_id,
            )

    async def _result(
        self, invocation: Invocation, workflow_id: str, handle: WorkflowHandle[Any, str]
    ) -> Record:
        """Wait for the workflow's record (raises RPCError for the caller to map)."""
        try:
            wire = await handle.result()
        except WorkflowFailureError as error:
            raise _closed_error(invocation, workflow_id, error.cause) from None
        try:
            if isinstance(wire, str) and wire.startswith(WIRE_PREFIX):
                return await read_record_wire(
                    self.content_store,
                    wire,
                    run_id=invocation.run_id,
                    what=f"workflow {workflow_id} for {invocation.stable_key()}",
                    limit=2 * self.max_record_bytes,
                )
            return decode_wire(wire, limit=2 * self.max_record_bytes)
        except RecordFormatError as error:
            raise type(error)(
                f"workflow {workflow_id} returned a bad record for "
                f"{invocation.stable_key()}: {error.detail}",
                run_id=invocation.run_id,
            ) from None


def _checked(invocation: Invocation, record: Record) -> Record:
    """The record if it belongs to exactly this invocation; otherwise fail closed."""
    if record.invocation == invocation and record.input_digest == invocation.input_digest():
        return record
    stored = record.invocation
    if stored.stable_key() == invocation.stable_key():
        if stored.input_digest() != invocation.input_digest():
            raise InputDrift(
                f"operation {invocation.stable_key()} was recorded with input "
                f"{stored.input_digest()} but arrived with {invocation.input_digest()}; an "
                "identity's input never changes (use a new sequence for new input)",
                run_id=invocation.run_id,
            )
        raise InputDrift(
            f"operation {invocation.stable_key()} was recorded for {stored.kind!s}/"
            f"{stored.handler_id} but arrived for {invocation.kind!s}/{invocation.handler_id}; "
            "an identity's kind and handler never change",
            run_id=invocation.run_id,
        )
    raise DigestMismatch(
        f"the record returned for {invocation.stable_key()} belongs to "
        f"{record.invocation.stable_key()} ({record.invocation.kind!s}/"
        f"{record.invocation.handler_id}); refusing it",
        run_id=invocation.run_id,
    )


def _closed_error(invocation: Invocation, workflow_id: str, cause: BaseException) -> ZincirError:
    """A zincir error for a workflow that closed without a record."""
    if isinstance(cause, ApplicationError) and cause.type in FAIL_CLOSED:
        return _ERRORS[cause.type](
            f"{cause.message} (workflow {workflow_id}; nothing was persisted)",
            run_id=invocation.run_id,
        )
    what = cause.message if isinstance(cause, FailureError) else str(cause)
    return WorkerError(
        f"workflow {workflow_id} for {invocation.stable_key()} closed without a record "
        f"({type(cause).__name__}: {what}); execute again to start it anew",
        run_id=invocation.run_id,
    )


def _rpc_error(invocation: Invocation, task_queue: str, error: RPCError) -> StoreError:
    return StoreError(
        f"the Temporal service failed ({error.status.name}: {error.message}) for "
        f"{invocation.stable_key()} on task queue {task_queue!r}; check the client's address, "
        "namespace and credentials, then execute again",
        run_id=invocation.run_id,
    )
