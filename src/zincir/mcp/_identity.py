"""Request identities: explicit (``DurableRequest``) or claimed from a ``DurableRequestSequence``.

An explicit identity is fixed by the caller from deterministic workflow state before any
request is scheduled, so concurrent requests keep their identities whatever order they
finish in. A sequence hands out ``start, start + 1, …`` in call order: safe only on a
sequential branch, where the order of calls is itself deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .._errors import InvalidDocument, InvalidInput
from .._validate import check_id, check_sequence
from ..agent import DurableBinding

__all__ = [
    "CLIENT_STEP",
    "EVENT_STRIDE",
    "MAX_EVENTS",
    "DurableRequest",
    "DurableRequestSequence",
    "event_identity",
]

CLIENT_STEP: Final = "mcp.client"
"""The step of identities a ``DurableRequestSequence`` claims (the agent's MCP tool calls use
``mcp.request``, so the two never collide)."""
EVENT_STRIDE: Final = 1000
"""A notification's ``event_delivery`` sequence is ``parent_sequence * EVENT_STRIDE + index``."""
MAX_EVENTS: Final = EVENT_STRIDE
"""A durable subscription returns at most this many notifications per request."""


@dataclass(frozen=True, slots=True)
class DurableRequest:
    """One request's identity: ``step_id`` (under the binding's namespace) and ``sequence``.

    A paginated helper uses ``sequence, sequence + 1, …`` of the step, one per page: give
    each listing its own step id.
    """

    step_id: str
    sequence: int

    def __post_init__(self) -> None:
        check_id(self.step_id, "a request's step id")
        check_sequence(self.sequence, "a request's sequence")

    def next(self) -> DurableRequest:
        """The identity of the next page of a listing."""
        return DurableRequest(self.step_id, self.sequence + 1)


@dataclass(slots=True)
class DurableRequestSequence:
    """Identities ``start, start + 1, …`` of ``step_id`` for the requests of one sequential
    branch of ``binding``'s run, claimed in call order."""

    binding: DurableBinding
    start: int = 0
    step_id: str = CLIENT_STEP
    _next: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.binding, DurableBinding):
            raise InvalidInput("a DurableRequestSequence needs a zincir.agent.DurableBinding")
        run_id = self.binding.run_id
        check_sequence(self.start, "the first sequence", run_id=run_id)
        check_id(self.step_id, "the sequence's step id", run_id=run_id)
        self._next = self.start

    @property
    def claimed(self) -> int:
        """How many identities have been claimed so far."""
        return self._next - self.start

    def claim(self) -> DurableRequest:
        """The next identity of the branch."""
        request = DurableRequest(self.step_id, self._next)
        self._next += 1
        return request


def event_identity(parent: DurableRequest, index: int, *, run_id: str) -> DurableRequest:
    """The identity of notification ``index`` of the durable subscription at ``parent``."""
    if not 0 <= index < EVENT_STRIDE:
        raise InvalidDocument(
            f"notification #{index} of {parent.step_id} #{parent.sequence} is past the "
            f"{EVENT_STRIDE} a durable subscription may deliver",
            run_id=run_id,
        )
    return DurableRequest(f"{parent.step_id}.event", parent.sequence * EVENT_STRIDE + index)
