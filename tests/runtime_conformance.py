"""The DurableRuntime conformance suite: what every runtime guarantees.

Subclass ``RuntimeConformance`` in a ``test_*.py`` module and provide a ``make_runtime``
fixture: an async factory ``(registry: HandlerRegistry) -> DurableRuntime``. Runtimes made by
one test's factory must share one durable backend (one store, one Temporal namespace), so a
second runtime replays what the first stored. Only ``DurableRuntime.execute`` is used; the
handlers count their calls in this process. Every test uses its own run id.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from zincir import (
    InputDrift,
    InvalidInvocation,
    MissingDurableHandler,
    OperationFailed,
    Suspend,
)
from zincir.contract import (
    Failure,
    Invocation,
    OperationKind,
    Record,
    Success,
    Suspended,
    SuspendReason,
)
from zincir.durable import DurableRuntime, HandlerRegistry

MakeRuntime = Callable[[HandlerRegistry], Awaitable[DurableRuntime]]

HANDLER_ID = "conformance-tools"


def new_run_id() -> str:
    """A run id no other test (or earlier test session on a shared backend) uses."""
    return f"conformance-{uuid.uuid4().hex}"


def make_invocation(
    run_id: str,
    *,
    step_id: str = "tool.call",
    sequence: int = 0,
    request: Any = None,
    kind: OperationKind = OperationKind.TOOL_CALL,
    handler_id: str = HANDLER_ID,
    input_json: str | None = None,
) -> Invocation:
    document = json.dumps({"order": "A1"} if request is None else request)
    return Invocation(
        run_id, step_id, sequence, kind, handler_id, document if input_json is None else input_json
    )


class Calls:
    """A handler that records each call and answers with ``answer(invocation, request)``."""

    def __init__(self, answer: Callable[[Invocation, Any], Any] | None = None) -> None:
        self.calls: list[tuple[Invocation, Any]] = []
        self.answer = answer

    async def __call__(self, invocation: Invocation, request: Any) -> Any:
        self.calls.append((invocation, request))
        await asyncio.sleep(0.01)  # let concurrent callers overlap with this one
        if self.answer is not None:
            return self.answer(invocation, request)
        return {"handled": request, "step": invocation.step_id, "seq": invocation.sequence}

    @property
    def count(self) -> int:
        return len(self.calls)


def registry_with(
    handler: Any, handler_id: str = HANDLER_ID, kind: OperationKind = OperationKind.TOOL_CALL
) -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register(kind, handler_id, handler)
    return registry


def never_called(invocation: Invocation, request: Any) -> Any:
    raise AssertionError(f"a replay must not call the handler ({invocation.stable_key()})")


class RuntimeConformance:
    """Test methods shared by every DurableRuntime; subclasses provide ``make_runtime``."""

    async def test_runtime_satisfies_the_protocol(self, make_runtime: MakeRuntime) -> None:
        runtime = await make_runtime(HandlerRegistry())
        assert isinstance(runtime, DurableRuntime)

    async def test_success_record_is_returned(self, make_runtime: MakeRuntime) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id(), request={"order": "A1", "qty": 2})
        record = await runtime.execute(invocation)
        assert isinstance(record, Record)
        assert record.invocation == invocation
        assert record.input_digest == invocation.input_digest()
        assert isinstance(record.outcome, Success)
        assert json.loads(record.outcome.output_json) == {
            "handled": {"order": "A1", "qty": 2},
            "step": "tool.call",
            "seq": 0,
        }
        # (3) the handler saw the invocation and its parsed request
        assert handler.calls == [(invocation, {"order": "A1", "qty": 2})]

    async def test_same_invocation_twice_runs_the_handler_once(
        self, make_runtime: MakeRuntime
    ) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        first = await runtime.execute(invocation)
        second = await runtime.execute(invocation)
        assert handler.count == 1
        assert first == second

    async def test_replay_by_another_runtime_does_not_call_the_handler(
        self, make_runtime: MakeRuntime
    ) -> None:
        runtime = await make_runtime(registry_with(Calls()))
        invocation = make_invocation(new_run_id())
        first = await runtime.execute(invocation)
        replaying = await make_runtime(registry_with(never_called))
        assert await replaying.execute(invocation) == first
        # (0) a stored record is returned even where no handler is registered at all
        unregistered = await make_runtime(HandlerRegistry())
        assert await unregistered.execute(invocation) == first

    async def test_dedupe_is_on_the_full_identity(self, make_runtime: MakeRuntime) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        run_id = new_run_id()
        same_input = [
            make_invocation(run_id, sequence=0),
            make_invocation(run_id, sequence=1),
            make_invocation(run_id, step_id="tool.other"),
            make_invocation(f"{run_id}/x", step_id="y"),
            make_invocation(run_id, step_id="x/y"),
        ]
        records = [await runtime.execute(invocation) for invocation in same_input]
        assert handler.count == len(same_input)
        assert [record.invocation for record in records] == same_input

    async def test_input_drift_is_refused(self, make_runtime: MakeRuntime) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        run_id = new_run_id()
        original = make_invocation(run_id, request={"order": "A1"})
        first = await runtime.execute(original)
        drifted = make_invocation(run_id, request={"order": "B2"})
        with pytest.raises(InputDrift) as raised:
            await runtime.execute(drifted)
        assert raised.value.run_id == run_id
        # same JSON value, different bytes: the digest binds the exact text
        with pytest.raises(InputDrift):
            await runtime.execute(make_invocation(run_id, input_json='{"order": "A1" }'))
        assert handler.count == 1
        assert await runtime.execute(original) == first

    async def test_operation_failed_is_a_persisted_failure(self, make_runtime: MakeRuntime) -> None:
        def refuse(invocation: Invocation, request: Any) -> Any:
            raise OperationFailed("OrderNotFound", retryable=False, message="no order A1")

        handler = Calls(refuse)
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        record = await runtime.execute(invocation)
        assert record.outcome == Failure("OrderNotFound", False, "no order A1")
        assert handler.count == 1
        replay = await (await make_runtime(registry_with(never_called))).execute(invocation)
        assert replay == record

    async def test_any_other_exception_is_a_failure_named_after_its_class(
        self, make_runtime: MakeRuntime
    ) -> None:
        def crash(invocation: Invocation, request: Any) -> Any:
            raise LookupError("the warehouse is unknown")

        handler = Calls(crash)
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Failure)
        assert record.outcome.error == "LookupError"
        assert record.outcome.retryable is False
        assert "the warehouse is unknown" in record.outcome.message
        assert await runtime.execute(invocation) == record
        assert handler.count == 1

    async def test_suspension_is_a_persisted_record(self, make_runtime: MakeRuntime) -> None:
        def ask(invocation: Invocation, request: Any) -> Any:
            raise Suspend("approval", {"ticket": 7, "question": "refund A1?"})

        handler = Calls(ask)
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Suspended)
        assert record.outcome.reason == SuspendReason.APPROVAL
        assert record.outcome.state_version == 1
        assert json.loads(record.outcome.state_json) == {"ticket": 7, "question": "refund A1?"}
        assert await runtime.execute(invocation) == record
        assert handler.count == 1

    async def test_an_invalid_outcome_becomes_a_failure(self, make_runtime: MakeRuntime) -> None:
        def bad_reason(invocation: Invocation, request: Any) -> Any:
            raise Suspend("because", {"x": 1})

        handler = Calls(bad_reason)
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Failure)
        assert record.outcome.retryable is False
        assert await runtime.execute(invocation) == record
        assert handler.count == 1

    async def test_missing_handler_persists_nothing(self, make_runtime: MakeRuntime) -> None:
        registry = HandlerRegistry()
        runtime = await make_runtime(registry)
        run_id = new_run_id()
        invocation = make_invocation(run_id, handler_id="registered-later")
        with pytest.raises(MissingDurableHandler) as raised:
            await runtime.execute(invocation)
        assert raised.value.run_id == run_id
        handler = Calls()
        registry.register(OperationKind.TOOL_CALL, "registered-later", handler)
        record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Success)
        assert handler.count == 1

    async def test_dispatch_is_by_kind_and_handler_id(self, make_runtime: MakeRuntime) -> None:
        tools, model = Calls(lambda i, r: "tools"), Calls(lambda i, r: "model")
        registry = registry_with(tools)
        registry.register(OperationKind.MODEL_REQUEST, "conformance-model", model)
        runtime = await make_runtime(registry)
        run_id = new_run_id()
        tool_record = await runtime.execute(make_invocation(run_id, sequence=0))
        model_record = await runtime.execute(
            make_invocation(
                run_id,
                step_id="model.request",
                kind=OperationKind.MODEL_REQUEST,
                handler_id="conformance-model",
            )
        )
        assert tool_record.outcome == Success('"tools"')
        assert model_record.outcome == Success('"model"')
        assert (tools.count, model.count) == (1, 1)

    async def test_sync_handlers_are_supported(self, make_runtime: MakeRuntime) -> None:
        calls: list[Any] = []

        def plain(invocation: Invocation, request: Any) -> Any:
            calls.append(request)
            return [1, 2, 3]

        runtime = await make_runtime(registry_with(plain))
        invocation = make_invocation(new_run_id())
        assert (await runtime.execute(invocation)).outcome == Success("[1,2,3]")
        assert (await runtime.execute(invocation)).outcome == Success("[1,2,3]")
        assert calls == [{"order": "A1"}]

    async def test_concurrent_executes_of_one_identity_run_once(
        self, make_runtime: MakeRuntime
    ) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        invocation = make_invocation(new_run_id())
        records = await asyncio.gather(*(runtime.execute(invocation) for _ in range(20)))
        assert handler.count == 1
        assert all(record == records[0] for record in records)

    @pytest.mark.parametrize(
        "broken",
        [
            {"run_id": ""},
            {"step_id": "tool\ncall"},
            {"sequence": -1},
            {"kind": "shell_command"},
            {"input_json": '{"order": NaN}'},
            {"input_json": '{"a": 1} {"b": 2}'},
            {"input_json": '{"a": 1, "a": 2}'},
        ],
    )
    async def test_invalid_invocations_store_nothing(
        self, make_runtime: MakeRuntime, broken: dict[str, Any]
    ) -> None:
        handler = Calls()
        runtime = await make_runtime(registry_with(handler))
        valid = make_invocation(new_run_id())
        fields = {**valid.to_dict(), **broken}
        with pytest.raises(InvalidInvocation):
            await runtime.execute(Invocation(**fields))
        assert handler.count == 0
        # nothing was stored under the identity: the valid invocation runs normally
        record = await runtime.execute(valid)
        assert isinstance(record.outcome, Success)
        assert handler.count == 1
