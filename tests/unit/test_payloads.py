"""Payload documents: round trips, strictness, sensitive headers, no pydantic error escaping."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zincir._errors import InvalidDocument, InvalidInput, NotJsonSerializable, SensitiveHeader
from zincir._json import MAX_NESTING
from zincir.contract import OperationKind
from zincir.payloads import (
    INPUT_DOCUMENTS,
    OUTPUT_DOCUMENTS,
    ApprovalDecision,
    ApprovalRequest,
    ClientIdentity,
    Document,
    EventDelivery,
    McpRequest,
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    PartDelta,
    PartEnd,
    PartStart,
    RetryDelay,
    RunContext,
    StreamUsage,
    TextPart,
    ToolCallPart,
    ToolDefinition,
    ToolOutput,
    ToolRequest,
    ToolReturnPart,
    Usage,
    is_sensitive_header,
    parse_payload,
    parse_stream_part,
    stream_parts,
)

CALL = ToolCallPart(tool_call_id="call-1", tool_name="refund", arguments={"order": "A1"})
MODEL_REQUEST = ModelRequest(
    model="openai:gpt-4o",
    messages=[
        Message(role="system", parts=[TextPart(text="Be brief.")]),
        Message(role="user", parts=[TextPart(text="Where is my order A1?")]),
        Message(role="assistant", parts=[CALL]),
        Message(
            role="tool",
            parts=[ToolReturnPart(tool_call_id="call-1", tool_name="refund", content={"ok": True})],
        ),
    ],
    tools=[ToolDefinition(name="refund", parameters={"type": "object"}, strict=True)],
    settings=ModelSettings(
        max_tokens=200, temperature=0.2, stop_sequences=["END"], extra_headers={"X-Trace": "t1"}
    ),
    metadata={"tenant": "acme"},
)
MODEL_RESPONSE = ModelResponse(
    parts=[TextPart(text="Refunding."), CALL],
    usage=Usage(input_tokens=12, output_tokens=5, details={"reasoning_tokens": 2}),
    model_name="gpt-4o",
    finish_reason="tool_call",
)
DECISION = ApprovalDecision(decision="approve", reason="ok", override_arguments={"order": "A1"})
TOOL_REQUEST = ToolRequest(
    call=CALL,
    arguments={"order": "A1"},
    context=RunContext(run_id="support-0192", step=3, agent_name="support"),
    retry=1,
    approval=DECISION,
)
TOOL_OUTPUT = ToolOutput(
    tool_call_id="call-1",
    tool_name="refund",
    content={"refunded": 10.5},
    follow_up_messages=[Message(role="user", parts=[TextPart(text="Thanks")])],
)
MCP_REQUEST = McpRequest(
    method="tools/call",
    params={"name": "search", "arguments": {"q": "zincir"}},
    meta={"progressToken": 1},
    headers={"X-Request-Id": "r1", "User-Agent": "zincir"},
    client=ClientIdentity(name="zincir", version="0.1.0"),
    max_round_trips=3,
)
EVENT = EventDelivery(name="notifications/progress", data={"p": 0.5}, source="mcp", index=2)
RETRY = RetryDelay(
    retry=2,
    failed_request=7,
    delay_seconds=1.5,
    cumulative_delay_seconds=2.5,
    error="RateLimited",
    retry_after_seconds=1,
    provider_metadata={"x-request-id": "abc"},
)
APPROVAL = ApprovalRequest(
    call=CALL, arguments={"order": "A1"}, execution="approval", proposed=DECISION
)

DOCUMENTS: list[Document] = [
    MODEL_REQUEST,
    MODEL_RESPONSE,
    TOOL_REQUEST,
    TOOL_OUTPUT,
    MCP_REQUEST,
    EVENT,
    RETRY,
    APPROVAL,
    DECISION,
    PartStart(index=0, part_kind="tool_call", tool_call_id="c", tool_name="t"),
    PartDelta(index=0, delta='{"a":'),
    PartEnd(index=0),
    StreamUsage(usage=Usage(input_tokens=1)),
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: type(d).__name__)
def test_documents_round_trip(document: Document) -> None:
    text = document.to_json()
    assert json.loads(text)["version"] == 1
    assert text.startswith('{"version":1,')
    assert " " not in text.replace("Be brief.", "").replace("Where is my order A1?", "")
    again = type(document).from_json(text)
    assert again == document
    assert again.to_json() == text
    assert type(document).from_json(text.encode()) == document
    assert type(document).from_dict(json.loads(text)) == document
    assert type(document).model_validate_json(text) == document


def test_every_kind_has_an_input_document() -> None:
    assert set(INPUT_DOCUMENTS) == set(OperationKind)
    samples = {
        OperationKind.MODEL_REQUEST: MODEL_REQUEST,
        OperationKind.MODEL_STREAM: MODEL_REQUEST,
        OperationKind.TOOL_CALL: TOOL_REQUEST,
        OperationKind.MCP_REQUEST: MCP_REQUEST,
        OperationKind.EVENT_DELIVERY: EVENT,
        OperationKind.RETRY_DELAY: RETRY,
        OperationKind.APPROVAL_RESUME: APPROVAL,
    }
    for kind, document in samples.items():
        assert parse_payload(kind, document.to_json()) == document
        assert parse_payload(kind.value, document.to_json()) == document


def test_output_documents() -> None:
    assert parse_payload("model_request", MODEL_RESPONSE.to_json(), output=True) == MODEL_RESPONSE
    assert parse_payload("tool_call", TOOL_OUTPUT.to_json(), output=True) == TOOL_OUTPUT
    assert parse_payload("approval_resume", DECISION.to_json(), output=True) == DECISION
    assert set(OUTPUT_DOCUMENTS) <= set(OperationKind)
    with pytest.raises(InvalidDocument, match="no output document"):
        parse_payload("retry_delay", "{}", output=True)


@pytest.mark.parametrize("kind", ["nope", "", 3, None])
def test_unknown_kind_is_an_invalid_document(kind: Any) -> None:
    with pytest.raises(InvalidDocument, match="no input document"):
        parse_payload(kind, "{}")


def test_document_for_the_wrong_kind_is_rejected() -> None:
    with pytest.raises(InvalidDocument):
        parse_payload("tool_call", MODEL_REQUEST.to_json())


def test_to_json_is_an_invocation_input() -> None:
    from zincir.contract import Invocation

    invocation = Invocation("r", "model.request", 0, "model_request", "h", MODEL_REQUEST.to_json())
    invocation.validate()


def test_lists_become_tuples_and_documents_are_immutable() -> None:
    assert isinstance(MODEL_REQUEST.messages, tuple)
    with pytest.raises(AttributeError, match="immutable"):
        MODEL_REQUEST.model = "other"
    with pytest.raises(AttributeError):
        del MODEL_REQUEST.model


def test_model_copy_with_update_is_validated() -> None:
    assert RETRY.model_copy(update={"retry": 3}).retry == 3
    with pytest.raises(InvalidDocument):
        RETRY.model_copy(update={"retry": 0})
    with pytest.raises(SensitiveHeader):
        MCP_REQUEST.model_copy(update={"headers": {"Cookie": "a=b"}})


def test_retry_delay_durations() -> None:
    assert RETRY.delay == timedelta(seconds=1.5)
    assert RETRY.cumulative_delay == timedelta(seconds=2.5)


def test_stream_parts_are_normalized() -> None:
    parts = stream_parts(MODEL_RESPONSE)
    assert [type(part).__name__ for part in parts] == [
        "PartStart",
        "PartDelta",
        "PartEnd",
        "PartStart",
        "PartDelta",
        "PartEnd",
        "StreamUsage",
    ]
    assert parts[1] == PartDelta(index=0, delta="Refunding.")
    assert parts[3] == PartStart(
        index=1, part_kind="tool_call", tool_call_id="call-1", tool_name="refund"
    )
    assert json.loads(parts[4].delta) == CALL.arguments  # type: ignore[union-attr]
    assert parts[-1] == StreamUsage(usage=MODEL_RESPONSE.usage)
    for part in parts:
        assert parse_stream_part(part.to_json()) == part


# -- strictness ------------------------------------------------------------------------------

BUILDERS: list[tuple[str, Callable[[], Any]]] = [
    ("string for int", lambda: Usage(input_tokens="1")),
    ("bool for int", lambda: Usage(input_tokens=True)),
    ("float for int", lambda: Usage(input_tokens=1.0)),
    ("negative count", lambda: Usage(input_tokens=-1)),
    ("int for str", lambda: TextPart(text=1)),
    (
        "int for bool",
        lambda: ToolReturnPart(tool_call_id="c", tool_name="t", content=1, is_error=1),
    ),
    ("empty name", lambda: ToolDefinition(name="")),
    ("unknown role", lambda: Message(role="robot", parts=[])),
    ("missing field", lambda: Message(role="user")),
    ("str for list", lambda: ModelRequest(messages="hi")),
    ("wrong version", lambda: ModelRequest(version=2, messages=[])),
    ("callable", lambda: ToolOutput(tool_call_id="c", tool_name="t", content=print)),
    ("tuple in json", lambda: ToolOutput(tool_call_id="c", tool_name="t", content=(1, 2))),
    (
        "nan",
        lambda: RetryDelay(
            retry=1, delay_seconds=float("nan"), cumulative_delay_seconds=1, error="E"
        ),
    ),
    ("nan in json value", lambda: EventDelivery(name="e", data=[float("inf")])),
    (
        "cumulative below delay",
        lambda: RetryDelay(retry=1, delay_seconds=3, cumulative_delay_seconds=1, error="E"),
    ),
    (
        "retry zero",
        lambda: RetryDelay(retry=0, delay_seconds=0, cumulative_delay_seconds=0, error="E"),
    ),
    (
        "too many round trips",
        lambda: McpRequest(method="m", client={"name": "c"}, max_round_trips=65),
    ),
    ("tool part without names", lambda: PartStart(index=0, part_kind="tool_call")),
    ("text part with names", lambda: PartStart(index=0, part_kind="text", tool_name="t")),
    ("bad decision", lambda: ApprovalDecision(decision="maybe")),
    ("empty header name", lambda: McpRequest(method="m", client={"name": "c"}, headers={"": "x"})),
    (
        "non-str header value",
        lambda: McpRequest(method="m", client={"name": "c"}, headers={"X-A": 1}),
    ),
    ("extra field", lambda: Usage(tokens=1)),
    (
        "nested extra field",
        lambda: ToolRequest(
            call={**CALL.to_dict(), "extra": 1}, arguments={}, context={"run_id": "r"}
        ),
    ),
    ("model_validate extra", lambda: ModelResponse.model_validate({"parts": [], "x": 1})),
    ("parts without type", lambda: ModelResponse.from_dict({"parts": [{"text": "a"}]})),
    ("top-level array", lambda: ModelResponse.from_json("[]")),
    ("from_dict non-mapping", lambda: ModelResponse.from_dict("x")),  # type: ignore[arg-type]
    ("model_validate_strings", lambda: Usage.model_validate_strings({"input_tokens": "x"})),
]


@pytest.mark.parametrize(("why", "build"), BUILDERS, ids=[why for why, _ in BUILDERS])
def test_invalid_documents_raise_invalid_document(why: str, build: Callable[[], Any]) -> None:
    with pytest.raises(InvalidDocument) as caught:
        build()
    assert not isinstance(caught.value, SensitiveHeader)
    assert not isinstance(caught.value, ValidationError)
    assert isinstance(caught.value, InvalidInput)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"parts":[]} {}',
        '{"parts":[],"parts":[]}',
        '{"parts":[],"usage":{"input_tokens":NaN}}',
        '{"parts":[],"model_name":"a","model_name":"b"}',
        '{"parts":[],"version":"1"}',
        '{"parts":[],"bogus":null}',
        '{"parts":[{"type":"text","text":"a","extra":1}]}',
        '{"parts":[{"type":"image","url":"x"}]}',
        '{"parts":{}}',
    ],
)
def test_invalid_json_raises_invalid_document(text: str) -> None:
    with pytest.raises(InvalidDocument):
        ModelResponse.from_json(text)
    with pytest.raises(InvalidDocument):
        ModelResponse.model_validate_json(text)
    with pytest.raises(InvalidDocument):
        parse_payload("model_request", text, output=True)


@pytest.mark.parametrize("data", [b"\xff{}", 3, None])
def test_non_text_raises_invalid_document(data: Any) -> None:
    with pytest.raises(InvalidDocument):
        ModelResponse.from_json(data)
    with pytest.raises(InvalidDocument):
        parse_stream_part(data)


def test_invalid_stream_part_raises_invalid_document() -> None:
    with pytest.raises(InvalidDocument):
        parse_stream_part('{"type":"part_delta","index":-1,"delta":"x"}')
    with pytest.raises(InvalidDocument):
        parse_stream_part('{"type":"chunk"}')


def test_error_messages_never_show_values() -> None:
    with pytest.raises(InvalidDocument) as caught:
        TextPart(text=12345678)
    assert "12345678" not in str(caught.value)
    assert "text" in str(caught.value)


# -- sensitive headers -----------------------------------------------------------------------

SENSITIVE = [
    "authorization",
    "Authorization",
    "PROXY-AUTHORIZATION",
    "Cookie",
    "set-cookie",
    "X-API-Key",
    "api-key",
    "Api_Key",
    "x-auth-token",
    "X-Amz-Security-Token",
    "x-goog-api-key",
    "client-secret",
    "X_CLIENT_SECRET",
    " authorization ",
]
PUBLIC = ["x-request-id", "content-type", "user-agent", "max-tokens", "token-count", "secretary"]


@pytest.mark.parametrize("name", SENSITIVE)
def test_sensitive_names(name: str) -> None:
    assert is_sensitive_header(name)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_names(name: str) -> None:
    assert not is_sensitive_header(name)


PLACES: list[tuple[str, Callable[[str], Any]]] = [
    ("mcp headers", lambda n: McpRequest(method="m", client={"name": "c"}, headers={n: "s3cr3t"})),
    ("mcp meta", lambda n: McpRequest(method="m", client={"name": "c"}, meta={n: "s3cr3t"})),
    ("model extra_headers", lambda n: ModelSettings(extra_headers={n: "s3cr3t"})),
    ("model extra_body nested", lambda n: ModelSettings(extra_body={"h": [{n: "s3cr3t"}]})),
    ("request metadata", lambda n: ModelRequest(messages=[], metadata={"a": {"b": {n: 1}}})),
    (
        "nested settings",
        lambda n: ModelRequest(messages=[], settings={"extra_headers": {n: "s3cr3t"}}),
    ),
    ("run context", lambda n: RunContext(run_id="r", metadata={n: "s3cr3t"})),
    (
        "tool output",
        lambda n: ToolOutput(tool_call_id="c", tool_name="t", content=1, metadata={n: "s3cr3t"}),
    ),
    ("event", lambda n: EventDelivery(name="e", metadata={n: "s3cr3t"})),
    (
        "retry",
        lambda n: RetryDelay(
            retry=1,
            delay_seconds=0,
            cumulative_delay_seconds=0,
            error="E",
            provider_metadata={n: "s3cr3t"},
        ),
    ),
    (
        "from_json",
        lambda n: McpRequest.from_json(
            json.dumps({"method": "m", "client": {"name": "c"}, "headers": {n: "s3cr3t"}})
        ),
    ),
    (
        "parse_payload",
        lambda n: parse_payload(
            "mcp_request",
            json.dumps(
                {"method": "m", "client": {"name": "c"}, "headers": {"ok": "1", n: "s3cr3t"}}
            ),
        ),
    ),
    (
        "model_validate",
        lambda n: ToolRequest.model_validate(
            {"call": CALL, "arguments": {}, "context": {"run_id": "r", "metadata": {n: 1}}}
        ),
    ),
]


@pytest.mark.parametrize("name", ["Authorization", "x-api-key", "session-token", "Set-Cookie"])
@pytest.mark.parametrize(("where", "build"), PLACES, ids=[where for where, _ in PLACES])
def test_sensitive_headers_are_rejected(name: str, where: str, build: Callable[[str], Any]) -> None:
    with pytest.raises(SensitiveHeader) as caught:
        build(name)
    message = str(caught.value)
    assert "s3cr3t" not in message
    assert "transport" in message
    assert isinstance(caught.value, InvalidDocument)


def test_public_headers_are_kept() -> None:
    assert MCP_REQUEST.headers == {"X-Request-Id": "r1", "User-Agent": "zincir"}


def test_arguments_and_params_are_not_header_maps() -> None:
    call = ToolCallPart(tool_call_id="c", tool_name="login", arguments={"api-key-name": "x"})
    assert McpRequest(method="m", client={"name": "c"}, params={"cookie": "jar"}).params
    assert call.arguments


def test_zincir_payloads_is_the_contract_module_under_its_public_name() -> None:
    import zincir.contract.payloads
    import zincir.payloads

    assert zincir.payloads.__all__ == zincir.contract.payloads.__all__
    for name in zincir.contract.payloads.__all__:
        assert getattr(zincir.payloads, name) is getattr(zincir.contract.payloads, name), name


# -- to_json composed from the kept texts of nested documents --------------------------------


def generic_text(document: Document) -> str:
    """The document's JSON encoded in one go from its dict form."""
    return json.dumps(
        document.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: type(d).__name__)
def test_to_json_is_the_one_encoding_of_the_dict_form(document: Document) -> None:
    assert document.to_json() == generic_text(document)
    assert document.to_json() == generic_text(document)  # the kept text, the same


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
NAMES = st.text(alphabet="abcxyz-_é0", min_size=1, max_size=8)
PARTS = (
    st.builds(TextPart, text=st.text(max_size=20))
    | st.builds(
        ToolCallPart,
        tool_call_id=NAMES,
        tool_name=NAMES,
        arguments=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3),
    )
    | st.builds(
        ToolReturnPart,
        tool_call_id=NAMES,
        tool_name=NAMES,
        content=JSON_VALUES,
        is_error=st.booleans(),
    )
)
MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    parts=st.lists(PARTS, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(MESSAGES, max_size=5),
    added=st.lists(MESSAGES, max_size=2),
    temperature=st.none() | st.floats(min_value=0, max_value=1e20),
    metadata=st.dictionaries(st.text(alphabet="abxyz09é ", max_size=6), JSON_VALUES, max_size=3),
)
def test_a_request_repeating_earlier_messages_has_the_text_of_its_dict_form(
    history: list[Message], added: list[Message], temperature: float | None, metadata: Any
) -> None:
    assume(not _names_a_credential(metadata))  # refused as a document: tested on its own
    tools = [ToolDefinition(name="refund", parameters={"type": "object", "x": metadata})]
    first = ModelRequest(model="m", messages=history, tools=tools)
    first.to_json()  # keeps the texts of the history's messages and of the tool
    second = ModelRequest(
        model="m",
        messages=[*history, *added],
        tools=tools,
        settings=ModelSettings(temperature=temperature),
        metadata=metadata,
    )
    assert second.to_json() == generic_text(second)
    assert ModelRequest.from_json(second.to_json()) == second


def _names_a_credential(value: Any) -> bool:
    """Whether any object key at any depth of ``value`` is one metadata may not hold."""
    if isinstance(value, dict):
        return any(is_sensitive_header(k) or _names_a_credential(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_names_a_credential(item) for item in value)
    return False


def test_a_lone_surrogate_in_a_nested_document_is_refused() -> None:
    request = ModelRequest(messages=[Message(role="user", parts=[TextPart(text="\ud800")])])
    with pytest.raises(NotJsonSerializable, match="lone surrogate"):
        request.to_json()


def test_nesting_too_deep_across_nested_documents_is_refused() -> None:
    content: Any = "deep"
    for _ in range(MAX_NESTING - 2):  # fits in the part, not in the request around it
        content = [content]
    part = ToolReturnPart(tool_call_id="c", tool_name="t", content=content)
    part.to_json()
    request = ModelRequest(messages=[Message(role="tool", parts=[part])])
    with pytest.raises(NotJsonSerializable, match="nested deeper"):
        request.to_json()


@pytest.mark.parametrize("brackets", range(MAX_NESTING - 16, MAX_NESTING + 8))
def test_brackets_inside_a_string_are_no_nesting(brackets: int) -> None:
    text = "[{" * (brackets // 2) + "[" * (brackets % 2)  # source code, a pasted JSON blob
    message = Message(role="user", parts=[TextPart(text=text)])
    request = ModelRequest(messages=[message])
    assert request.to_json() == generic_text(request)
    later = ModelRequest(messages=[message, Message(role="user", parts=[TextPart(text="ok")])])
    assert later.to_json() == generic_text(later)
