"""The ``Model`` protocol on the payload documents, and ``FunctionModel`` for scripted runs."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from .._errors import InvalidDocument, InvalidInput
from ..contract.payloads import ModelRequest, ModelResponse, StreamPart

__all__ = ["FunctionModel", "Model", "coerce_response"]

ModelFunction = Callable[[ModelRequest], Awaitable[Any] | Any]
StreamFunction = Callable[[ModelRequest], AsyncIterator[StreamPart]]


@runtime_checkable
class Model(Protocol):
    """A language model seen through the neutral documents of ``zincir.payloads``.

    A model may also set ``rate_limit`` (a ``zincir.RateLimit``): the durable path then has
    each of its requests wait for the limit's capacity, shared through the run's store.
    """

    name: str

    async def request(self, request: ModelRequest) -> ModelResponse:
        """One buffered request."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """One streamed request: parts, then usage."""
        ...


def coerce_response(value: object, *, model: str, run_id: str | None = None) -> ModelResponse:
    """A ``ModelResponse`` from what a model returned (a document or its JSON object form)."""
    if isinstance(value, ModelResponse):
        return value
    if isinstance(value, Mapping):
        try:
            return ModelResponse.from_dict(value)
        except InvalidDocument as error:
            raise InvalidDocument(
                f"model {model!r} returned a response that is not a valid document: {error.detail}",
                run_id=run_id,
            ) from None
    raise InvalidDocument(
        f"model {model!r} returned {type(value).__name__}; a model must return a "
        "zincir.payloads.ModelResponse",
        run_id=run_id,
    )


class FunctionModel:
    """A model whose answers come from ``fn(request)`` (sync or async): tests, scripted agents.

    ``stream_fn`` (an async iterator of stream parts) serves ``stream``; without it
    streaming raises NotImplementedError.
    """

    def __init__(
        self, fn: ModelFunction, stream_fn: StreamFunction | None = None, *, name: str = "function"
    ) -> None:
        if not callable(fn):
            raise InvalidInput("fn must be a callable (ModelRequest) -> ModelResponse")
        self.fn = fn
        self.stream_fn = stream_fn
        self.name = name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Call ``fn`` and check that it answered with a valid response document."""
        answer = self.fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return coerce_response(answer, model=self.name)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """The parts ``stream_fn`` yields for ``request``."""
        if self.stream_fn is None:
            raise NotImplementedError(f"FunctionModel {self.name!r} has no stream_fn")
        return self.stream_fn(request)
