"""``RateLimit``: a provider's limits shared through the store by every process using a key.

A model with a ``rate_limit`` attribute (``OpenAIChatModel(..., rate_limit=...)``, or any
``Model`` setting one) has each request it really makes (never a replayed one: a stored
record runs no handler) wait for capacity first: the request reserves its slot on the key's
buckets in one store transaction (its token cost estimated from its size: a token per four
characters of the request document, plus its ``max_tokens``), the process sleeps until then
(recorded as the run's wait: ``runs list --stuck`` says "waiting for rate limit KEY until
T") and checks once more that no 429 blocked the key meanwhile. The response's usage
corrects the token estimate; a 429 with ``Retry-After`` blocks the key for everyone until
then (and empties its buckets: requests resume at the limit's pace), and the agent's retry
path retries the request after it.

Each bucket holds one second of its limit (at least one request, or the request's tokens):
requests are spread evenly over the minute, as providers enforce their limits over short
periods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from .._errors import InvalidInput, OperationFailed
from .._validate import check_id, shown
from ..contract.payloads import ModelRequest, ModelResponse
from ..store._rate_limits import BucketRates
from ._retry import provider_retry_after

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["RateLimit", "limited_request", "model_rate_limit", "rate_limit_scope"]

CHARS_PER_TOKEN: Final = 4
"""The estimate of a request's input tokens before it is made: its characters over this."""
BURST_SECONDS: Final = 1.0
"""How much of a limit a bucket holds: one second of it (at least one request)."""

_SCOPE: ContextVar[tuple[Store, str] | None] = ContextVar("zincir_rate_limit", default=None)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A provider's limits on key ``key`` (a label the processes sharing the limit agree
    on, such as an API key's name; never the API key itself: it is stored and shown as
    is): ``requests_per_minute`` and/or ``tokens_per_minute`` (input and output tokens),
    shared through the store."""

    key: str
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    rates: BucketRates = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_id(self.key, "a rate limit key")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidInput(f"{name} must be a positive number or None, got {shown(value)}")
            if value == float("inf"):
                raise InvalidInput(f"{name} must be finite; leave it None for no limit")
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        if rpm is None and tpm is None:
            raise InvalidInput(
                f"RateLimit {self.key!r} sets no limit: give requests_per_minute and/or "
                "tokens_per_minute"
            )
        rates = BucketRates(
            requests_per_second=None if rpm is None else rpm / 60,
            requests_burst=1.0 if rpm is None else max(1.0, rpm / 60 * BURST_SECONDS),
            tokens_per_second=None if tpm is None else tpm / 60,
            tokens_burst=1.0 if tpm is None else max(1.0, tpm / 60 * BURST_SECONDS),
        )
        object.__setattr__(self, "rates", rates)


def check_rate_limit(value: object) -> RateLimit | None:
    """``value`` as a model's ``rate_limit``, else InvalidInput."""
    if value is not None and not isinstance(value, RateLimit):
        raise InvalidInput(f"rate_limit must be a zincir.RateLimit or None, not {shown(value)}")
    return value


def model_rate_limit(model: object) -> RateLimit | None:
    """The ``rate_limit`` a model sets (None: it makes its requests unlimited)."""
    limit = getattr(model, "rate_limit", None)
    return limit if isinstance(limit, RateLimit) else None


@contextmanager
def rate_limit_scope(store: Store | None, run_id: str) -> Iterator[None]:
    """Let the model request handlers run in this block find the store holding run
    ``run_id`` (its rate limits' capacity is taken there)."""
    if store is None:
        yield
        return
    token = _SCOPE.set((store, run_id))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def estimate_tokens(request_json: str, request: ModelRequest) -> int:
    """The tokens a request may use, before it is made: its size, and its output bound."""
    return len(request_json) // CHARS_PER_TOKEN + (request.settings.max_tokens or 0)


async def limited_request(
    limit: RateLimit,
    run_id: str,
    request_json: str,
    request: ModelRequest,
    call: Callable[[], Awaitable[ModelResponse]],
) -> ModelResponse:
    """``call()`` once ``limit`` has capacity for it, counted in the store holding run
    ``run_id``; without one in scope (a handler run in another process), at once."""
    scope = _SCOPE.get()
    if scope is None or scope[1] != run_id:
        return await call()
    store = scope[0]
    rates = limit.rates
    estimate = estimate_tokens(request_json, request) if rates.tokens_per_second else 0
    wait = await store.take_rate_limit(limit.key, rates, estimate, run_id)
    while wait > 0:
        await asyncio.sleep(wait)
        wait = await store.take_rate_limit(limit.key, rates, estimate, run_id, again=True)
    try:
        response = await call()
    except OperationFailed as error:
        seconds = provider_retry_after(error) if error.error == "RateLimited" else None
        if seconds:
            await store.block_rate_limit(limit.key, rates, seconds)
        raise
    if rates.tokens_per_second:
        used = response.usage.input_tokens + response.usage.output_tokens
        if used != estimate:
            await store.settle_rate_limit(limit.key, rates.tokens_per_second, used - estimate)
    return response
