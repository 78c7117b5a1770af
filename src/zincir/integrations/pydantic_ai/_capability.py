"""ZincirDurability: the pydantic-ai capability that journals every model request, tool call,
MCP request and event delivery of an agent run as zincir operations under the run's lease."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Literal, get_args

from pydantic_ai import UserPromptNode
from pydantic_ai.agent import AbstractAgent, EventStreamHandler
from pydantic_ai.capabilities import WrapRunHandler
from pydantic_ai.capabilities.abstract import AgentNode
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    conversation_id_from_run_id,
    external_event_scope,
    replay_scope,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, DeferredToolRequests, RunContext
from pydantic_core import to_jsonable_python

from ..._errors import InvalidInput, OperationFailed
from ..._validate import check_lease_ttl
from ...durable import DurableRuntime, HandlerRegistry, LocalRuntime, RetryPolicy
from ...restart import RestartStore
from ...runs import AgentContext
from ...runs._context import DEFAULT_LEASE_TTL
from ...runs._versions import app_version_or_default
from ...store import Store, as_store, open_store
from ._approvals import apply_decisions
from ._backend import ZincirBackend
from ._run import CURRENT_RUN, open_run
from ._stream import checkpointed
from ._waiter import ZincirWaiter

__all__ = ["DEFAULT_UNIT_RETRY", "ParallelMode", "ZincirDurability"]

ParallelMode = Literal["parallel_ordered_events", "sequential"]

DEFAULT_UNIT_RETRY = RetryPolicy(
    max_attempts=4, initial_interval=timedelta(seconds=1), max_interval=timedelta(seconds=60)
)


def _not_serializable(error: Exception) -> BaseException:
    """A value the JSON codec cannot hold never will: a non-retryable failure."""
    return OperationFailed("NotJsonSerializable", False, f"{type(error).__name__}: {error}")


class _Resources:
    """The store and runtime, opened once and shared by every bound copy of the capability."""

    def __init__(
        self, store: Store | str | os.PathLike[str] | None, runtime: DurableRuntime | None
    ) -> None:
        if runtime is not None and not isinstance(runtime, DurableRuntime):
            raise InvalidInput(f"runtime must be a DurableRuntime, not {type(runtime).__name__}")
        if store is None and runtime is None:
            raise InvalidInput("ZincirDurability needs store= (a store or a path) or runtime=")
        if store is not None and not isinstance(store, str | os.PathLike):
            as_store(store)
        self._store = store
        self._runtime = runtime

    @property
    def store(self) -> Store:
        if self._store is None:
            found = getattr(self._runtime, "store", None)
            if found is None:
                raise InvalidInput(
                    "this runtime exposes no store for the runs' leases; pass store= as well"
                )
            self._store = as_store(found)
        elif isinstance(self._store, str | os.PathLike):
            self._store = open_store(self._store)
        return self._store

    @property
    def runtime(self) -> DurableRuntime:
        if self._runtime is None:
            self._runtime = LocalRuntime(self.store, HandlerRegistry())
        return self._runtime


class ZincirDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent's runs durable on zincir: attach it as
    ``Agent(..., name=..., capabilities=[ZincirDurability(store="agent.db")])`` and run with
    ``agent.run(prompt, run_id=...)``; after a crash, the same call resumes from the records.

    ``runtime`` is any DurableRuntime (a LocalRuntime by default, on ``store``); ``retry``
    governs retryable failures that outlast the runtime's own attempts (each retry a durable
    ``retry.delay``, then the unit under its next sequence); ``lease_ttl`` is the run's lease;
    ``app_version`` is recorded on each run it creates (default ``$ZINCIR_APP_VERSION``).
    ``parallel_execution_mode`` is how a response's tool calls run: side by side, their
    result events in call order (the default; their writes share commits), or one at a time
    (``"sequential"``). Each call's units are numbered by its position in the response, so
    either mode replays into the same records.
    With ``restart_store`` (a FileRestartStore or SQLRestartStore) the ``event_stream_handler``
    is fed through a CheckpointedStreamSink per unit (segment ``<stream_segment>.<step>.<seq>``),
    so a restarted worker does not deliver again the events its predecessor committed.
    """

    engine_spec: ClassVar[DurabilityEngineSpec] = DurabilityEngineSpec(
        engine_name="zincir",
        durable_unit_noun="operation",
        durable_container_noun="run",
        codec=JSON_CODEC,
        serialization_failure=_not_serializable,
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        sequential_tools_in_durable_context=False,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key="zincir",
    )

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        runtime: DurableRuntime | None = None,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        retry: RetryPolicy = DEFAULT_UNIT_RETRY,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        restart_store: RestartStore | None = None,
        stream_segment: str = "events",
        app_version: str | None = None,
        parallel_execution_mode: ParallelMode = "parallel_ordered_events",
    ) -> None:
        if restart_store is not None:
            if event_stream_handler is None:
                raise InvalidInput("restart_store= checkpoints the event_stream_handler; pass one")
            event_stream_handler = checkpointed(event_stream_handler, restart_store, stream_segment)
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        if not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry must be a RetryPolicy, not {type(retry).__name__}")
        self.retry = retry
        self.lease_ttl = check_lease_ttl(lease_ttl)
        self.app_version = app_version_or_default(app_version)
        if parallel_execution_mode not in get_args(ParallelMode):
            raise InvalidInput(
                f"parallel_execution_mode must be one of {', '.join(get_args(ParallelMode))}, "
                f"not {parallel_execution_mode!r}"
            )
        self.parallel_execution_mode: ParallelMode = parallel_execution_mode
        self._resources = _Resources(store, runtime)

    @property
    def store(self) -> Store:
        """The zincir store holding the runs (opened on first use when given as a path)."""
        return self._resources.store

    @property
    def runtime(self) -> DurableRuntime:
        """The runtime every unit is executed by."""
        return self._resources.runtime

    @property
    def in_durable_context(self) -> bool:
        return True  # every run of the agent is journaled under its run id

    def get_durable_operation_backend(self) -> ZincirBackend:
        return ZincirBackend(self)

    def get_default_run_id(self) -> str | None:
        raise UserError(
            "ZincirDurability resumes a run by its id: pass one, agent.run(..., run_id='...')"
        )

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id)

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        run_id = ctx.run_id
        assert run_id is not None  # get_default_run_id refuses a run without one
        scope = await open_run(
            self.store,
            run_id,
            agent=self.name,
            config={"agent": self.name, "prompt": _jsonable(ctx.prompt)},
            lease_ttl=self.lease_ttl,
            parent_id=_parent_run(ctx, run_id),
            app_version=self.app_version,
        )
        token = CURRENT_RUN.set(scope)
        try:
            with (
                replay_scope(),
                external_event_scope(ZincirWaiter(self, scope)),
                AbstractAgent.parallel_tool_call_execution_mode(self.parallel_execution_mode),
            ):
                result = await super().wrap_run(ctx, handler=handler)
        except BaseException as error:
            if scope.ctx is not None:
                if scope.is_terminal(error):
                    await _quietly(scope.ctx.fail(f"{type(error).__name__}: {error}"))
                else:
                    await _quietly(scope.ctx.release())
            raise
        finally:
            CURRENT_RUN.reset(token)
        if scope.ctx is not None:
            await _finish(scope.ctx, result.output)
        return result

    async def before_node_run(
        self, ctx: RunContext[AgentDepsT], *, node: AgentNode[AgentDepsT]
    ) -> AgentNode[AgentDepsT]:
        """A continuation's decisions go through ``approval_resume`` first: the persisted
        ones are applied, each bound to the arguments it lets run."""
        scope = CURRENT_RUN.get()
        if (
            isinstance(node, UserPromptNode)
            and node.deferred_tool_results is not None
            and scope is not None
            and scope.agent == self.name
        ):
            decided = await apply_decisions(self, scope, ctx.messages, node.deferred_tool_results)
            node = dataclasses.replace(node, deferred_tool_results=decided)
        return await super().before_node_run(ctx, node=node)


async def _finish(ctx: AgentContext, output: object) -> None:
    """Complete the run with its output; a run ending in deferred calls stays recoverable."""
    if isinstance(output, DeferredToolRequests):
        await ctx.release()
        return
    await ctx.complete({"output": _jsonable(output)})


def _parent_run(ctx: RunContext[Any], run_id: str) -> str | None:
    """The run whose messages this one continues (a deferred-results continuation)."""
    for message in reversed(ctx.messages):
        previous = getattr(message, "run_id", None)
        if isinstance(previous, str) and previous and previous != run_id:
            return previous
    return None


def _jsonable(value: object) -> Any:
    return to_jsonable_python(value, fallback=repr, bytes_mode="base64")


async def _quietly(action: Awaitable[None]) -> None:
    """Close the run on the way out without hiding the error that ended it."""
    with contextlib.suppress(Exception):
        await action
