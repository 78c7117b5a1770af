"""Handlers are registered by (kind, handler_id), never serialized; dispatch turns what a
handler returns or raises into exactly one outcome."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from .._errors import (
    DigestMismatch,
    InputDrift,
    InvalidInput,
    MissingDurableHandler,
    NotJsonSerializable,
    OperationFailed,
    RecordFormatError,
    Suspend,
)
from .._json import StrictJsonError, dumps, loads_strict
from .._validate import printable
from ..contract import Failure, Invocation, OperationKind, Outcome, Record, Success, Suspended
from ..contract.payloads import Document

__all__ = [
    "DocumentHandler",
    "Handler",
    "HandlerRegistry",
    "attempt_outcome",
    "dispatch",
    "outcome_of",
]

Handler = Callable[[Invocation, Any], Awaitable[Any] | Any]
H = TypeVar("H", bound=Handler)


class DocumentHandler:
    """A handler that reads its input document from ``invocation.input_json`` itself (with
    the payload type's ``from_json``): dispatch does not parse the input for it and passes
    ``None`` as the request."""

    __slots__ = ("handle",)

    def __init__(self, handle: Callable[[Invocation], Awaitable[Any]]) -> None:
        self.handle = handle

    def __call__(self, invocation: Invocation, request: Any) -> Awaitable[Any]:
        return self.handle(invocation)


def _kind(kind: OperationKind | str) -> OperationKind:
    try:
        return OperationKind(kind)
    except ValueError:
        raise InvalidInput(
            f"unknown operation kind {kind!r}; use one of {[k.value for k in OperationKind]}"
        ) from None


class HandlerRegistry:
    """Maps (kind, handler_id) to the callable (or CommandHandler) that runs it."""

    def __init__(self) -> None:
        self._handlers: dict[tuple[OperationKind, str], Handler] = {}

    def register(self, kind: OperationKind | str, handler_id: str, handler: Handler) -> None:
        """Register ``handler`` for (kind, handler_id); a second registration is an error."""
        key = (_kind(kind), handler_id)
        if not isinstance(handler_id, str) or not handler_id:
            raise InvalidInput("handler_id must be a non-empty string")
        if not callable(handler):
            raise InvalidInput(f"the handler for {key} must be callable")
        if key in self._handlers:
            raise InvalidInput(f"a handler is already registered for {key[0].value}/{handler_id}")
        self._handlers[key] = handler

    def handler(self, kind: OperationKind | str, handler_id: str) -> Callable[[H], H]:
        """Decorator form of :meth:`register`."""

        def decorate(function: H) -> H:
            self.register(kind, handler_id, function)
            return function

        return decorate

    def get(self, kind: OperationKind | str, handler_id: str) -> Handler | None:
        try:
            return self._handlers.get((OperationKind(kind), handler_id))
        except ValueError:
            return None

    def require(self, invocation: Invocation) -> Handler:
        """The handler for an invocation, or MissingDurableHandler."""
        handler = self.get(invocation.kind, invocation.handler_id)
        if handler is None:
            raise MissingDurableHandler(
                f"no handler registered for kind {invocation.kind!s} and handler id "
                f"{invocation.handler_id!r}; register it with the worker's HandlerRegistry",
                run_id=invocation.run_id,
            )
        return handler

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        return self.get(key[0], key[1]) is not None

    def __iter__(self) -> Iterator[tuple[OperationKind, str]]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


def outcome_of(invocation: Invocation, value: Any) -> Outcome:
    """Turn a handler's return value (output document, outcome or record) into an outcome."""
    if isinstance(value, Success | Failure | Suspended):
        return value
    if isinstance(value, Record):
        check_record(invocation, value)
        return value.outcome
    if isinstance(value, Document):
        return Success(value.to_json())
    try:
        return Success(dumps(value, what="handler output", run_id=invocation.run_id, remember=True))
    except NotJsonSerializable as error:
        return Failure("OutputNotJson", False, error.detail)


def check_record(invocation: Invocation, record: Record) -> None:
    """A record must be for this exact invocation; anything else fails closed."""
    if record.input_digest != record.invocation.input_digest():
        raise DigestMismatch(
            "the record's input digest does not match its own invocation's input",
            run_id=invocation.run_id,
        )
    if record.invocation != invocation:
        same_key = record.invocation.stable_key() == invocation.stable_key()
        if same_key and record.input_digest != invocation.input_digest():
            raise InputDrift(
                f"identity {invocation.stable_key()} returned a record for different input",
                run_id=invocation.run_id,
            )
        raise DigestMismatch(
            f"a record for {record.invocation.stable_key()} came back for "
            f"{invocation.stable_key()}",
            run_id=invocation.run_id,
        )


def _failure_from(error: BaseException) -> Failure:
    if isinstance(error, OperationFailed):
        return Failure(error.error, bool(error.retryable), error.message)
    name = type(error).__name__
    return Failure(name, False, str(error)[:4000])


async def dispatch(handler: Handler, invocation: Invocation) -> Outcome:
    """Run one attempt of ``handler``; every result or exception becomes one outcome.

    ``OperationFailed`` gives its failure, ``Suspend`` a suspension, any other exception a
    non-retryable failure named after its class. Records and outcomes returned by the
    handler (as a CommandHandler does) are checked against the invocation.
    """
    request: Any = None
    if not isinstance(handler, DocumentHandler):
        try:
            request = loads_strict(invocation.input_json)
        except StrictJsonError as error:
            return Failure("InvalidInput", False, str(error))
    try:
        result = handler(invocation, request)
        if inspect.isawaitable(result):
            result = await result
    except Suspend as suspend:
        try:
            state_json = dumps(
                suspend.state, what="suspension state", run_id=invocation.run_id, remember=True
            )
        except NotJsonSerializable as error:
            return Failure("SuspendStateNotJson", False, error.detail)
        return Suspended(suspend.reason, suspend.state_version, state_json)
    except (DigestMismatch, InputDrift):
        raise
    except Exception as error:
        return _failure_from(error)
    return outcome_of(invocation, result)


async def attempt_outcome(handler: Handler, invocation: Invocation) -> Outcome:
    """One attempt, as every runtime stores it: an outcome that cannot be stored (a bad
    suspend reason, an empty error name) becomes a non-retryable ``InvalidOutcome``."""
    try:
        outcome = await dispatch(handler, invocation)
    except (DigestMismatch, InputDrift):
        raise
    except (InvalidInput, RecordFormatError) as error:
        return _invalid(invocation, error.detail)
    if isinstance(outcome, Failure) and isinstance(outcome.message, str):
        outcome = Failure(outcome.error, outcome.retryable, printable(outcome.message))
    try:
        Record.for_invocation(invocation, outcome).validate()
    except (InvalidInput, RecordFormatError) as error:
        return _invalid(invocation, error.detail)
    return outcome


def _invalid(invocation: Invocation, detail: str) -> Failure:
    return Failure(
        "InvalidOutcome",
        False,
        printable(
            f"the handler {invocation.handler_id!r} for {OperationKind(invocation.kind).value} "
            f"produced an outcome that cannot be stored: {detail}"
        )[:4000],
    )
