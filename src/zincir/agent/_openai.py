"""``OpenAIChatModel``: the ``Model`` protocol on the official ``openai`` SDK (chat completions).

Any OpenAI-compatible endpoint works: credentials and the base URL live in the client
(``AsyncOpenAI(base_url=..., api_key=...)``), never in a payload. SDK errors become
``ProviderError`` (an ``OperationFailed``) with a stable error name at one boundary:

    RateLimited                    429                          retryable, ``retry_after``
    ProviderUnavailable            5xx, connection failure      retryable, ``retry_after``
    ProviderTimeout                408, client timeout          retryable
    ProviderConflict               409                          retryable
    ProviderBadRequest             400                          not retryable
    ProviderAuthenticationFailed   401
    ProviderPermissionDenied       403
    ProviderNotFound               404 (model or base URL)
    ProviderRejected               any other 4xx
    ProviderError                  anything else the SDK raises
    InvalidModelResponse           a completion without choices

Tool-call arguments that are not a JSON object are no error here: the call carries its text
as ``ToolCallPart.malformed_arguments``, and the agent loop sends it back to the model as a
retry prompt (and sends the text back as is in the assistant message, as the provider
expects).

The SDK client's own retries (``AsyncOpenAI(max_retries=2)`` by default) happen inside one
attempt, beneath the agent's durable retries (``Agent(retry=...)``); set ``max_retries=0``
on the client to leave every retry to zincir.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .._errors import InvalidInput, OperationFailed
from .._json import dumps
from ..contract.payloads import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolCallPart,
    ToolDefinition,
    ToolReturnPart,
    Usage,
)
from ._rate_limit import RateLimit, check_rate_limit
from ._tools import call_part

if TYPE_CHECKING:
    import openai
    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionContentPartTextParam,
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallParam,
        ChatCompletionToolParam,
    )
    from openai.types.shared_params import FunctionDefinition

__all__ = ["OpenAIChatModel", "ProviderError"]

_EXTRA: Final = 'OpenAIChatModel needs the openai SDK: pip install "zincir[openai]"'
_MAX_MESSAGE: Final = 500
_STATUS_NAMES: Final[Mapping[int, tuple[str, bool]]] = {
    400: ("ProviderBadRequest", False),
    401: ("ProviderAuthenticationFailed", False),
    403: ("ProviderPermissionDenied", False),
    404: ("ProviderNotFound", False),
    408: ("ProviderTimeout", True),
    409: ("ProviderConflict", True),
    429: ("RateLimited", True),
}


class ProviderError(OperationFailed):
    """A provider call failed; ``retry_after`` is the provider's ``Retry-After`` in seconds.

    The message repeats it as ``Retry-After: <seconds> s`` so it survives a persisted
    failure record, which keeps only the error name, retryability and message.
    """

    def __init__(
        self,
        error: str,
        retryable: bool,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status_code = status_code
        self.retry_after = retry_after
        if retry_after is not None:
            message = f"{message} (Retry-After: {retry_after:g} s)"
        super().__init__(error, retryable, message)


class OpenAIChatModel:
    """A chat-completions model on ``openai.AsyncOpenAI``.

    ``client`` defaults to ``AsyncOpenAI()``, created on first use (it reads
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``). ``settings`` are defaults that a request's
    own settings override field by field (headers and ``extra_body`` are merged).
    ``rate_limit`` (a ``zincir.RateLimit``) makes each request wait for the capacity it
    shares through the run's store with every process using its key.
    """

    def __init__(
        self,
        model_name: str,
        client: openai.AsyncOpenAI | None = None,
        *,
        settings: ModelSettings | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        try:  # imported here, not with zincir.agent: it takes about half a second
            import openai
        except ImportError as error:
            raise ImportError(_EXTRA) from error
        if not isinstance(model_name, str) or not model_name:
            raise InvalidInput("model_name must be a non-empty str")
        if client is not None and not isinstance(client, openai.AsyncOpenAI):
            raise InvalidInput("client must be an openai.AsyncOpenAI or None")
        if settings is not None and not isinstance(settings, ModelSettings):
            raise InvalidInput("settings must be a zincir.payloads.ModelSettings or None")
        self.name = model_name
        self.model_name = model_name
        self.settings = settings if settings is not None else ModelSettings()
        self.rate_limit = check_rate_limit(rate_limit)
        self._client = client
        self._owns_client = client is None

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_name!r})"

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client; the default one is created here, on first use."""
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI()
        return self._client

    async def close(self) -> None:
        """Close the default client if this model created it; a given client is the caller's."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def request(self, request: ModelRequest) -> ModelResponse:
        """One chat completion, mapped back to a ``ModelResponse``."""
        import openai

        arguments = self._arguments(request)
        try:
            completion = await self.client.chat.completions.create(**arguments)
        except openai.OpenAIError as error:
            raise provider_error(error) from None
        return _response(completion)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """One streamed chat completion as normalised parts (start, deltas, end), then usage."""
        import openai

        arguments = self._arguments(request)
        assembler = _StreamAssembler()
        try:
            chunks = await self.client.chat.completions.create(
                **arguments, stream=True, stream_options={"include_usage": True}
            )
            async with chunks:
                async for chunk in chunks:
                    for part in assembler.feed(chunk):
                        yield part
        except openai.OpenAIError as error:
            raise provider_error(error) from None
        for part in assembler.finish():
            yield part

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        if not isinstance(request, ModelRequest):
            raise InvalidInput("request must be a zincir.payloads.ModelRequest")
        settings = _merge(self.settings, request.settings)
        arguments: dict[str, Any] = {
            "model": self.model_name,
            "messages": chat_messages(request.messages),
        }
        if request.tools:
            arguments["tools"] = [chat_tool(tool) for tool in request.tools]
            if settings.parallel_tool_calls is not None:
                arguments["parallel_tool_calls"] = settings.parallel_tool_calls
        optional = {
            "max_tokens": settings.max_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": settings.seed,
            "stop": list(settings.stop_sequences) or None,
            "timeout": settings.timeout_seconds,
            "extra_headers": settings.extra_headers or None,
            "extra_body": settings.extra_body or None,
        }
        arguments.update((key, value) for key, value in optional.items() if value is not None)
        return arguments


def _merge(defaults: ModelSettings, override: ModelSettings) -> ModelSettings:
    """``override``'s set values over ``defaults`` (None and empty mean "not set")."""
    merged = defaults.to_dict()
    for key, value in override.to_dict().items():
        if key in ("extra_headers", "extra_body"):
            merged[key] = {**merged[key], **value}
        elif value is not None and value != []:
            merged[key] = value
    return ModelSettings.from_dict(merged)


# -- our documents → chat completions -------------------------------------------------------


def chat_messages(messages: Iterable[Message]) -> list[ChatCompletionMessageParam]:
    """The chat-completions messages of a conversation (a tool result is one ``tool`` message)."""
    chat: list[ChatCompletionMessageParam] = []
    for message in messages:
        texts = [part.text for part in message.parts if isinstance(part, TextPart)]
        calls = [part for part in message.parts if isinstance(part, ToolCallPart)]
        returns = [part for part in message.parts if isinstance(part, ToolReturnPart)]
        if message.role == "assistant":
            if returns:
                raise InvalidInput("an assistant message cannot carry tool results")
            assistant: ChatCompletionAssistantMessageParam = {
                "role": "assistant",
                "content": _content(texts) if texts else None,
            }
            if calls:
                assistant["tool_calls"] = [_chat_call(call) for call in calls]
            chat.append(assistant)
            continue
        if calls:
            raise InvalidInput(f"a {message.role} message cannot carry tool calls")
        if message.role == "system" and texts:
            chat.append({"role": "system", "content": _content(texts)})
        elif message.role == "user" and texts:
            chat.append({"role": "user", "content": _content(texts)})
        elif texts:
            raise InvalidInput("a tool message carries tool results only, not text")
        chat.extend(
            {"role": "tool", "tool_call_id": part.tool_call_id, "content": _tool_content(part)}
            for part in returns
        )
    return chat


def _content(texts: list[str]) -> str | list[ChatCompletionContentPartTextParam]:
    """One text as a string; several as text content parts, so none is merged or lost."""
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _chat_call(call: ToolCallPart) -> ChatCompletionMessageToolCallParam:
    return {
        "id": call.tool_call_id,
        "type": "function",
        "function": {"name": call.tool_name, "arguments": call.arguments_text},
    }


def _tool_content(part: ToolReturnPart) -> str:
    """A tool result as the model reads it: a string as is, any other JSON value as JSON."""
    return part.content if isinstance(part.content, str) else dumps(part.content)


def chat_tool(tool: ToolDefinition) -> ChatCompletionToolParam:
    """A tool definition as a chat-completions function tool."""
    parameters: dict[str, object] = dict(tool.parameters) or {"type": "object", "properties": {}}
    function: FunctionDefinition = {"name": tool.name, "parameters": parameters}
    if tool.description:
        function["description"] = tool.description
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


# -- chat completions → our documents -------------------------------------------------------


def _response(completion: ChatCompletion) -> ModelResponse:
    if not completion.choices:
        raise ProviderError(
            "InvalidModelResponse", False, f"completion {completion.id!r} has no choices"
        )
    choice = completion.choices[0]
    message = choice.message
    parts: list[TextPart | ToolCallPart] = []
    text = message.content or message.refusal
    if text:
        parts.append(TextPart(text=text))
    for position, call in enumerate(message.tool_calls or ()):
        function = getattr(call, "function", None)
        if function is None:
            raise ProviderError(
                "InvalidModelResponse",
                False,
                f"tool call {call.id!r} is a {call.type!r} call; only function tools are sent",
            )
        call_id = call.id or f"call_{position}"
        parts.append(call_part(call_id, function.name, function.arguments))
    return ModelResponse(
        parts=parts,
        usage=_usage(completion.usage),
        model_name=completion.model or "",
        finish_reason=choice.finish_reason,
        provider_response_id=completion.id or None,
    )


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    details: dict[str, int] = {}
    cache_read = cache_write = 0
    if usage.prompt_tokens_details is not None:
        for key, value in usage.prompt_tokens_details.model_dump(exclude_none=True).items():
            if key == "cached_tokens":
                cache_read = value
            elif key == "cache_write_tokens":
                cache_write = value
            elif isinstance(value, int) and value > 0:
                details[f"input_{key}"] = value
    if usage.completion_tokens_details is not None:
        for key, value in usage.completion_tokens_details.model_dump(exclude_none=True).items():
            if isinstance(value, int) and value > 0:
                details[key] = value
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cache_read or 0,
        cache_write_tokens=cache_write or 0,
        details=details,
    )


@dataclass(slots=True)
class _Call:
    """One streamed tool call: its part index once started, and its argument text so far."""

    index: int | None = None
    call_id: str = ""
    name: str = ""
    chunks: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamAssembler:
    """Turns chat-completion chunks into stream parts whatever the chunk boundaries.

    A text part ends when a tool call begins (later text opens a new part); tool-call
    parts end when the stream does (arguments that are not a JSON object are passed on as
    they are: assembling the response keeps them as the call's ``malformed_arguments``).
    """

    parts: int = 0
    text: int | None = None
    calls: dict[int, _Call] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamPart]:
        out: list[StreamPart] = []
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            text = delta.content or delta.refusal
            if text:
                if self.text is None:
                    self.text = self._open(out, PartStart(index=self.parts, part_kind="text"))
                out.append(PartDelta(index=self.text, delta=text))
            for update in delta.tool_calls or ():
                call = self.calls.setdefault(update.index, _Call())
                function = update.function
                call.call_id = call.call_id or update.id or ""
                call.name = call.name or (function and function.name) or ""
                fragment = (function and function.arguments) or ""
                if call.index is None and call.name:
                    self._start(out, update.index, call)
                if fragment:
                    call.chunks.append(fragment)
                    if call.index is None:
                        call.pending.append(fragment)
                    else:
                        out.append(PartDelta(index=call.index, delta=fragment))
        return out

    def finish(self) -> list[StreamPart]:
        out: list[StreamPart] = []
        if self.text is not None:
            out.append(PartEnd(index=self.text))
            self.text = None
        for number, call in sorted(self.calls.items()):
            if call.index is None:
                raise ProviderError(
                    "InvalidModelResponse", False, f"streamed tool call {number} has no name"
                )
            out.append(PartEnd(index=call.index))
        out.append(StreamUsage(usage=self.usage))
        return out

    def _open(self, out: list[StreamPart], start: PartStart) -> int:
        out.append(start)
        self.parts += 1
        return start.index

    def _start(self, out: list[StreamPart], number: int, call: _Call) -> None:
        if self.text is not None:
            out.append(PartEnd(index=self.text))
            self.text = None
        call.call_id = call.call_id or f"call_{number}"
        call.index = self._open(
            out,
            PartStart(
                index=self.parts,
                part_kind="tool_call",
                tool_call_id=call.call_id,
                tool_name=call.name,
            ),
        )
        out.extend(PartDelta(index=call.index, delta=text) for text in call.pending)
        call.pending.clear()


# -- SDK errors → zincir errors -------------------------------------------------------------


def provider_error(error: openai.OpenAIError) -> ProviderError:
    """The ``ProviderError`` for an SDK error (see the module docstring for the names)."""
    import openai

    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        name, retryable = _STATUS_NAMES.get(status, ("ProviderRejected", False))
        if status >= 500:
            name, retryable = "ProviderUnavailable", True
        request_id = f", request id {error.request_id}" if error.request_id else ""
        return ProviderError(
            name,
            retryable,
            f"HTTP {status}{request_id}: {_short(_body_message(error))}",
            status_code=status,
            retry_after=retry_after(error.response.headers) if retryable else None,
        )
    if isinstance(error, openai.APITimeoutError):
        return ProviderError("ProviderTimeout", True, _short(str(error)))
    if isinstance(error, openai.APIConnectionError):
        cause = f" ({type(error.__cause__).__name__})" if error.__cause__ else ""
        return ProviderError("ProviderUnavailable", True, f"{_short(str(error))}{cause}")
    return ProviderError("ProviderError", False, f"{type(error).__name__}: {_short(str(error))}")


def _body_message(error: openai.APIStatusError) -> str:
    """The provider's own error message when its body has one, else the SDK's."""
    body = error.body
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) and message else error.message


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms``, or ``Retry-After`` (seconds or an HTTP date)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = _seconds(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"
