"""Bad input for the pure contract: the record codec, the payload documents, invocations.

Each target feeds mutated valid inputs (and hypothesis-built structures) to one entry point
and holds it to its documented error type: ``decode_record`` raises only
``RecordFormatError``, the payload readers only ``InvalidDocument``, invocation validation
only ``InvalidInput``. A record that decodes must also encode back to an equal record.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliability._fuzz_core import Mutator, Tally
from zincir import (
    Failure,
    InvalidDocument,
    InvalidInput,
    Invocation,
    Record,
    RecordFormatError,
    Success,
    Suspended,
    decode_record,
    encode_record,
)
from zincir.contract import payloads as docs
from zincir.contract._invocation import INVOCATION_FIELDS

__all__ = [
    "fuzz_codec",
    "fuzz_invocations",
    "fuzz_payloads",
    "payload_seeds",
    "record_seeds",
]

_RUN_IDS = ("run-1", "研究-ajan", "a/b%c", "r" * 256)


def record_seeds() -> list[bytes]:
    """Canonical records of every outcome, ids with escapes and non-ASCII, nested input."""
    inputs = (
        '{"q":"x","n":[1,2.5,null,true,{"deep":[[]]}]}',
        '"just a string"',
        '{"é":"ünïcödé ✓","esc":"\\u0000\\n\\"q\\""}',
        "[]",
    )
    outcomes = (
        Success('{"ok":1}'),
        Success('{"text":"done","parts":[{"type":"text","text":"hi"}]}'),
        Failure("RateLimited", True, "slow down"),
        Failure("Broken", False),
        Suspended("approval", 1, '{"question":"refund 42 EUR?"}'),
        Suspended("external_tool", 7, "null"),
    )
    seeds = []
    for index, outcome in enumerate(outcomes):
        invocation = Invocation(
            _RUN_IDS[index % len(_RUN_IDS)],
            f"step.{index}",
            index * 1000,
            ("tool_call", "model_request", "mcp_request")[index % 3],
            "handler-a",
            inputs[index % len(inputs)],
        )
        seeds.append(encode_record(Record.for_invocation(invocation, outcome)).encode())
    return seeds


def payload_seeds() -> dict[type[docs.Document], list[bytes]]:
    """Valid documents of every payload class, as ``to_json()`` writes them."""
    call = docs.ToolCallPart(tool_call_id="c1", tool_name="search", arguments={"q": "zincir"})
    message = docs.Message(
        role="user",
        parts=[docs.TextPart(text="hi ✓"), call, docs.ToolReturnPart(**_return_part())],
    )
    decision = docs.ApprovalDecision(decision="approve", reason="ok", override_arguments={"a": 1})
    found: dict[type[docs.Document], list[docs.Document]] = {
        docs.ModelRequest: [
            docs.ModelRequest(
                model="m",
                messages=[message],
                tools=[docs.ToolDefinition(name="search", parameters={"type": "object"})],
                settings=docs.ModelSettings(max_tokens=5, top_p=0.5, stop_sequences=["x"]),
                metadata={"trace": [1, {"k": None}]},
            )
        ],
        docs.ModelResponse: [
            docs.ModelResponse(
                parts=[docs.TextPart(text="done"), call],
                usage=docs.Usage(input_tokens=3, details={"r": 1}),
                finish_reason="stop",
            )
        ],
        docs.ToolRequest: [
            docs.ToolRequest(
                call=call,
                arguments={"q": "zincir"},
                context=docs.RunContext(run_id="r1", step=2, metadata={"m": 1}),
                approval=decision,
            )
        ],
        docs.ToolOutput: [
            docs.ToolOutput(
                tool_call_id="c1", tool_name="search", content={"hits": 3}, follow_up_messages=[]
            )
        ],
        docs.ApprovalRequest: [
            docs.ApprovalRequest(
                call=call, arguments={"q": 1}, execution="approval", proposed=decision
            )
        ],
        docs.ApprovalDecision: [decision],
        docs.McpRequest: [
            docs.McpRequest(
                method="tools/call",
                params={"name": "x"},
                headers={"x-trace": "1"},
                client=docs.ClientIdentity(name="zincir", version="1"),
            )
        ],
        docs.EventDelivery: [
            docs.EventDelivery(name="progress", data=[1, 2], source="mcp", parent_sequence=3)
        ],
        docs.RetryDelay: [
            docs.RetryDelay(
                retry=2, delay_seconds=1.5, cumulative_delay_seconds=3.0, error="RateLimited"
            )
        ],
        docs.PartStart: [
            docs.PartStart(index=0, part_kind="tool_call", tool_call_id="c", tool_name="t")
        ],
        docs.PartDelta: [docs.PartDelta(index=1, delta='{"q":')],
        docs.PartEnd: [docs.PartEnd(index=2)],
        docs.StreamUsage: [docs.StreamUsage(usage=docs.Usage(output_tokens=9))],
    }
    return {cls: [doc.to_json().encode() for doc in items] for cls, items in found.items()}


def _return_part() -> dict[str, Any]:
    return {"tool_call_id": "c1", "tool_name": "search", "content": [1, "two"], "is_error": True}


def _decode_and_round_trip(data: bytes | str, tally: Tally, round_trips: Tally) -> None:
    record = tally.call((RecordFormatError,), lambda: decode_record(data))
    if isinstance(record, Record):
        again = round_trips.call((), lambda: decode_record(encode_record(record)))
        if again is not None and again != record:
            round_trips.untyped += 1
            round_trips.note(f"decode(encode(r)) != r for {data!r:.200}")


def fuzz_codec(count: int, rng: random.Random, structured: int) -> tuple[Tally, Tally]:
    """``count`` mutated records (as bytes and as text) through ``decode_record``, then
    ``structured`` hypothesis-built record trees; every decoded record is re-encoded."""
    tally, round_trips = Tally("decode_record"), Tally("encode_record round trip")
    mutator = Mutator(record_seeds(), rng)
    for index in range(count):
        data = mutator.mutate()
        if index % 4 == 3:  # the same input as text, lone surrogates kept
            _decode_and_round_trip(data.decode("utf-8", "surrogateescape"), tally, round_trips)
        else:
            _decode_and_round_trip(data, tally, round_trips)
    for seed in record_seeds():
        _decode_and_round_trip(seed, tally, round_trips)
    _hypothesis(
        structured, _record_trees(), lambda text: _decode_and_round_trip(text, tally, round_trips)
    )
    return tally, round_trips


def fuzz_payloads(count: int, rng: random.Random, structured: int) -> Tally:
    """Mutated documents through ``Doc.from_json``, ``parse_payload`` and
    ``parse_stream_part``; hypothesis-built JSON trees through ``Doc.from_dict``."""
    from zincir import OperationKind

    tally = Tally("payload documents")
    seeds = payload_seeds()
    classes = list(seeds)
    mutators = {cls: Mutator(texts, rng) for cls, texts in seeds.items()}
    inputs = {kind: cls for kind, cls in docs.INPUT_DOCUMENTS.items()}
    outputs = {kind: cls for kind, cls in docs.OUTPUT_DOCUMENTS.items()}
    kinds = [*OperationKind, "no_such_kind", ""]
    for index in range(count):
        cls = classes[index % len(classes)]
        data = mutators[cls].mutate()
        text: bytes | str = data if index % 2 else data.decode("utf-8", "surrogateescape")
        tally.call((InvalidDocument,), cls.from_json, text)
        if index % 5 == 0:
            kind = rng.choice(kinds)
            output = rng.random() < 0.5
            table = outputs if output else inputs
            donor = table.get(kind, cls) if isinstance(kind, OperationKind) else cls
            mutated = mutators.get(donor, mutators[cls]).mutate()
            tally.call(
                (InvalidDocument,), partial(docs.parse_payload, output=output), kind, mutated
            )
        if index % 7 == 0:
            part = mutators[rng.choice((docs.PartStart, docs.PartDelta, docs.StreamUsage))].mutate()
            tally.call((InvalidDocument,), docs.parse_stream_part, part)

    def from_dict(tree: Any) -> None:
        for cls in classes:
            tally.call((InvalidDocument,), cls.from_dict, tree)

    _hypothesis(structured, _payload_trees(), from_dict)
    return tally


def fuzz_invocations(count: int, rng: random.Random, structured: int) -> Tally:
    """Invocations with broken fields through ``validate``, ``stable_key``, ``input_digest``
    and ``Invocation.from_dict``; only ``InvalidInput`` may leave them."""
    tally = Tally("invocation validation")
    mutator = Mutator([b'{"q":"x"}', b"[1,2]", b'"s"'], rng)
    strange: list[Any] = [
        "",
        "\x00",
        "\ud800",
        "a\nb",
        "x" * 257,
        "é" * 129,
        None,
        True,
        -1,
        2**63,
        1.5,
        b"bytes",
        ["list"],
        {"d": 1},
    ]
    valid = {
        "run_id": "run-1",
        "step_id": "tool.call",
        "sequence": 0,
        "kind": "tool_call",
        "handler_id": "h",
        "input_json": '{"q":"x"}',
    }
    for index in range(count):
        fields = dict(valid)
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(INVOCATION_FIELDS)
            if name == "input_json" and rng.random() < 0.6:
                fields[name] = mutator.mutate().decode("utf-8", "surrogateescape")
            else:
                fields[name] = rng.choice(strange)
        invocation = Invocation(**fields)
        bound = rng.choice((None, 1, 16, 1024 * 1024, 0, -5, True, "9", 2.0))
        tally.call((InvalidInput,), invocation.validate, bound)
        tally.call((InvalidInput,), invocation.stable_key)
        tally.call((InvalidInput,), invocation.input_digest)
        if index % 3 == 0:
            mapping: Any = dict(fields)
            if rng.random() < 0.3:
                mapping[rng.choice(("extra", "", "RUN_ID"))] = 1
            if rng.random() < 0.3:
                mapping.pop(rng.choice(INVOCATION_FIELDS))
            if rng.random() < 0.05:
                mapping = rng.choice((None, [], "text", 3))
            tally.call((InvalidInput,), _from_dict_validated, mapping)

    def built(fields: dict[str, Any]) -> None:
        invocation = Invocation(**fields)
        tally.call((InvalidInput,), invocation.validate)
        tally.call((InvalidInput,), invocation.stable_key)
        tally.call((InvalidInput,), invocation.input_digest)
        tally.call((InvalidInput,), lambda: Invocation.from_dict(fields))

    _hypothesis(structured, _invocation_fields(), built)
    return tally


def _from_dict_validated(mapping: Any) -> None:
    Invocation.from_dict(mapping).validate()


# -- hypothesis strategies ----------------------------------------------------------------

_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "\ud800", "\x00", "x" * 300, "tool_call", "approval", "success"]),
)
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        _TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)


def _hypothesis(
    examples: int, strategy: st.SearchStrategy[Any], check: Callable[[Any], None]
) -> None:
    """Run ``check`` on ``examples`` values of ``strategy`` (no database, no shrinking needed:
    ``check`` counts findings instead of raising)."""
    if examples <= 0:
        return

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(value: Any) -> None:
        check(value)

    run()


def _record_trees() -> st.SearchStrategy[str]:
    """Record-shaped JSON with any field of any type, as text."""
    import json

    invocation = st.fixed_dictionaries(
        {},
        optional={name: st.one_of(_JSON, _TEXT, st.integers()) for name in INVOCATION_FIELDS},
    )
    outcome = st.one_of(
        _JSON,
        st.dictionaries(
            st.sampled_from(["success", "failure", "suspended", "other"]),
            st.dictionaries(
                st.sampled_from(
                    [
                        "output_json",
                        "error",
                        "retryable",
                        "message",
                        "reason",
                        "state_version",
                        "state_json",
                        "x",
                    ]
                ),
                _JSON,
                max_size=4,
            ),
            max_size=2,
        ),
    )
    tree = st.fixed_dictionaries(
        {},
        optional={
            "version": st.one_of(st.just(1), _JSON),
            "invocation": st.one_of(invocation, _JSON),
            "input_digest": st.one_of(st.just("sha256:" + "a" * 64), _TEXT),
            "outcome": outcome,
            "extra": _JSON,
        },
    )
    return tree.map(lambda value: json.dumps(value, ensure_ascii=False))


def _payload_trees() -> st.SearchStrategy[Any]:
    """JSON trees shaped like payload documents, with parts and messages of any type."""
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "tool_call", "tool_return", "x"])},
        optional={
            "text": _JSON,
            "tool_call_id": _TEXT,
            "tool_name": _TEXT,
            "arguments": _JSON,
            "content": _JSON,
        },
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "tool", "bot"])},
        optional={"parts": st.lists(part, max_size=3)},
    )
    return st.one_of(
        _JSON,
        st.fixed_dictionaries(
            {},
            optional={
                "version": st.one_of(st.just(1), _JSON),
                "messages": st.one_of(st.lists(message, max_size=3), _JSON),
                "parts": st.one_of(st.lists(part, max_size=3), _JSON),
                "settings": st.one_of(
                    st.fixed_dictionaries(
                        {}, optional={"extra_headers": st.dictionaries(_TEXT, _JSON, max_size=2)}
                    ),
                    _JSON,
                ),
                "metadata": st.dictionaries(
                    st.sampled_from(["Authorization", "x-api-key", "ok", "a_token"]), _JSON
                ),
                "call": st.one_of(part, _JSON),
                "decision": _TEXT,
                "name": _TEXT,
                "retry": _JSON,
                "delay_seconds": _JSON,
            },
        ),
    )


def _invocation_fields() -> st.SearchStrategy[dict[str, Any]]:
    anything = st.one_of(_JSON, _TEXT, st.binary(max_size=4), st.integers())
    return st.fixed_dictionaries({name: anything for name in INVOCATION_FIELDS})
