"""Records and their canonical JSON: layout, round trips, strict decoding and a decoder fuzz."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zincir._errors import (
    AmbiguousOutcome,
    DigestMismatch,
    InvalidPayload,
    RecordFormatError,
    UnknownField,
    UnsupportedVersion,
    ZincirError,
)
from zincir.contract import (
    Failure,
    Invocation,
    OperationKind,
    Record,
    Success,
    Suspended,
    SuspendReason,
    decode_record,
    encode_record,
)

INVOCATION = Invocation(
    run_id="support-0192",
    step_id="model.request",
    sequence=4,
    kind=OperationKind.MODEL_REQUEST,
    handler_id="support-agent",
    input_json='{"prompt":"Where is my order?"}',
)
DIGEST = INVOCATION.input_digest()
CANONICAL = (
    '{"version":1,"invocation":{"run_id":"support-0192","step_id":"model.request",'
    '"sequence":4,"kind":"model_request","handler_id":"support-agent",'
    '"input_json":"{\\"prompt\\":\\"Where is my order?\\"}"},'
    f'"input_digest":"{DIGEST}",'
    '"outcome":{"success":{"output_json":"{\\"answer\\":\\"on its way\\"}"}}}'
)
OUTCOMES = [
    Success('{"answer":"on its way"}'),
    Failure("RateLimited", True, "429 from provider"),
    Failure("ToolCrashed", False),
    Suspended(SuspendReason.APPROVAL, 1, '{"call":"c1"}'),
    Suspended("external_tool", 0, "[]"),
    Suspended("provider_resume", 2**63 - 1, "null"),
]


def canonical(outcome: Any = None) -> str:
    return encode_record(Record.for_invocation(INVOCATION, outcome or OUTCOMES[0]))


def tree(outcome: Any = None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(canonical(outcome))
    return data


def dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def test_canonical_layout_is_pinned() -> None:
    assert canonical() == CANONICAL
    assert decode_record(CANONICAL) == Record(INVOCATION, DIGEST, OUTCOMES[0])


def test_failure_and_suspended_layouts() -> None:
    failure = tree(OUTCOMES[1])["outcome"]
    assert dump(failure) == (
        '{"failure":{"error":"RateLimited","retryable":true,"message":"429 from provider"}}'
    )
    suspended = tree(OUTCOMES[3])["outcome"]
    assert dump(suspended) == (
        '{"suspended":{"reason":"approval","state_version":1,"state_json":"{\\"call\\":\\"c1\\"}"}}'
    )


@pytest.mark.parametrize("outcome", OUTCOMES, ids=repr)
def test_every_outcome_round_trips(outcome: Any) -> None:
    record = Record.for_invocation(INVOCATION, outcome)
    text = encode_record(record)
    assert decode_record(text) == record
    assert decode_record(text.encode("utf-8")) == record
    assert encode_record(decode_record(text)) == text


def test_decoded_enums_are_enums() -> None:
    record = decode_record(canonical(OUTCOMES[4]))
    assert record.invocation.kind is OperationKind.MODEL_REQUEST
    assert isinstance(record.outcome, Suspended)
    assert record.outcome.reason is SuspendReason.EXTERNAL_TOOL


def test_for_invocation_computes_the_digest() -> None:
    assert Record.for_invocation(INVOCATION, OUTCOMES[0]).input_digest == DIGEST


def test_any_valid_layout_is_accepted_and_re_encoded_canonically() -> None:
    data = tree(OUTCOMES[2])
    del data["outcome"]["failure"]["message"]  # message defaults to ""
    reordered = {key: data[key] for key in reversed(list(data))}
    reordered["invocation"] = dict(reversed(list(data["invocation"].items())))
    text = json.dumps(reordered, indent=2, ensure_ascii=True)
    assert encode_record(decode_record(text)) == canonical(OUTCOMES[2])


def test_non_ascii_is_written_as_utf8() -> None:
    invocation = Invocation("çalışma-1", "adım/1", 0, "tool_call", "araç", '{"ş":"🦆"}')
    text = encode_record(Record.for_invocation(invocation, Success('"ü"')))
    assert "çalışma-1" in text and "🦆" in text and "\\u" not in text
    assert encode_record(decode_record(text.encode("utf-8"))) == text


def test_large_input_is_not_bounded_by_the_decoder() -> None:
    big = json.dumps("x" * (2 * 1024 * 1024))
    invocation = Invocation("r", "s", 0, "tool_call", "h", big)
    text = encode_record(Record.for_invocation(invocation, OUTCOMES[0]))
    assert decode_record(text).invocation.input_json == big


def test_record_format_errors_are_zincir_errors() -> None:
    for cls in (UnknownField, UnsupportedVersion, InvalidPayload, AmbiguousOutcome, DigestMismatch):
        assert issubclass(cls, RecordFormatError) and issubclass(cls, ZincirError)


# -- encode rejects invalid records ----------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (Record(INVOCATION, "sha256:" + "0" * 64, OUTCOMES[0]), DigestMismatch),
        (Record(INVOCATION, "md5:abc", OUTCOMES[0]), InvalidPayload),
        (Record(INVOCATION, DIGEST.upper(), OUTCOMES[0]), InvalidPayload),
        (Record(INVOCATION, DIGEST, "done"), InvalidPayload),  # type: ignore[arg-type]
        (Record("inv", DIGEST, OUTCOMES[0]), InvalidPayload),  # type: ignore[arg-type]
        (Record.for_invocation(INVOCATION, Success("{")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Success("NaN")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Failure("", False)), InvalidPayload),
        (Record.for_invocation(INVOCATION, Failure("a\nb", False)), InvalidPayload),
        (Record.for_invocation(INVOCATION, Failure("E", 1)), InvalidPayload),  # type: ignore[arg-type]
        (Record.for_invocation(INVOCATION, Failure("E", True, "\ud800")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Suspended("paused", 1, "{}")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Suspended("approval", -1, "{}")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Suspended("approval", True, "{}")), InvalidPayload),
        (Record.for_invocation(INVOCATION, Suspended("approval", 1, "{} {}")), InvalidPayload),
    ],
)
def test_encode_rejects_invalid_records(record: Record, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_record(record)


def test_encode_rejects_an_invalid_invocation() -> None:
    invocation = Invocation("r", "s", -1, "tool_call", "h", "{}")
    with pytest.raises(InvalidPayload, match="sequence"):
        encode_record(Record(invocation, invocation.input_digest(), OUTCOMES[0]))
    with pytest.raises(InvalidPayload):
        encode_record("not a record")  # type: ignore[arg-type]


# -- decode: one error class per defect ------------------------------------------------------


def _set(path: tuple[str, ...], value: Any) -> str:
    data = tree()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return dump(data)


def _drop(path: tuple[str, ...]) -> str:
    data = tree()
    target = data
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return dump(data)


@pytest.mark.parametrize(
    "text",
    [
        _set(("extra",), 1),
        _set(("invocation", "attempt"), 1),
        _set(("outcome", "success", "cached"), True),
        _set(("outcome", "cancelled"), {}),
        dump({"outcome": {"succeeded": {}}, **{k: v for k, v in tree().items() if k != "outcome"}}),
    ],
)
def test_unknown_fields_are_rejected(text: str) -> None:
    with pytest.raises(UnknownField):
        decode_record(text)


@pytest.mark.parametrize("version", [0, 2, 99, -1, 10**30])
def test_other_versions_are_unsupported(version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        decode_record(_set(("version",), version))


def test_missing_version_is_unsupported_even_with_unknown_fields() -> None:
    with pytest.raises(UnsupportedVersion):
        decode_record(_drop(("version",)))
    future = tree()
    future["version"] = 2
    future["signature"] = "x"
    with pytest.raises(UnsupportedVersion):
        decode_record(dump(future))


@pytest.mark.parametrize("version", ["1", 1.0, True, None, [1]])
def test_version_of_wrong_type_is_invalid(version: Any) -> None:
    with pytest.raises(InvalidPayload, match="version"):
        decode_record(_set(("version",), version))


@pytest.mark.parametrize(
    "outcome",
    [
        {},
        {"success": {"output_json": "1"}, "failure": {"error": "E", "retryable": False}},
        {
            "success": {"output_json": "1"},
            "suspended": {"reason": "approval", "state_version": 1, "state_json": "{}"},
        },
    ],
)
def test_zero_or_several_outcomes_are_ambiguous(outcome: Any) -> None:
    with pytest.raises(AmbiguousOutcome):
        decode_record(_set(("outcome",), outcome))


@pytest.mark.parametrize("text", [_drop(("outcome",)), _set(("outcome",), None)])
def test_missing_outcome_is_ambiguous(text: str) -> None:
    with pytest.raises(AmbiguousOutcome):
        decode_record(text)


def test_digest_of_other_input_is_a_mismatch() -> None:
    other = Invocation("r", "s", 1, "tool_call", "h", '{"a":2}').input_digest()
    with pytest.raises(DigestMismatch, match="support-0192/model.request/4"):
        decode_record(_set(("input_digest",), other))
    with pytest.raises(DigestMismatch):
        decode_record(_set(("invocation", "input_json"), '{"prompt": "Where is my order?"}'))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        '"record"',
        CANONICAL[:-1],
        CANONICAL + "{}",
        CANONICAL.replace('"sequence":4', '"sequence":4,"sequence":4'),
        CANONICAL.replace('"sequence":4', '"sequence":NaN'),
        CANONICAL.replace('"version":1', '"version":Infinity'),
        _set(("invocation",), "x"),
        _set(("invocation",), None),
        _drop(("invocation",)),
        _drop(("input_digest",)),
        _drop(("invocation", "kind")),
        _set(("invocation", "sequence"), -1),
        _set(("invocation", "sequence"), 2**63),
        _set(("invocation", "sequence"), "4"),
        _set(("invocation", "sequence"), 4.0),
        _set(("invocation", "kind"), "model_call"),
        _set(("invocation", "run_id"), ""),
        _set(("invocation", "run_id"), "r" * 257),
        _set(("invocation", "step_id"), "a\x00b"),
        _set(("invocation", "input_json"), {"prompt": "x"}),
        _set(("invocation", "input_json"), "NaN"),
        _set(("input_digest",), 7),
        _set(("input_digest",), "sha256:xyz"),
        _set(("outcome",), []),
        _set(("outcome", "success"), "1"),
        _drop(("outcome", "success", "output_json")),
        _set(("outcome", "success", "output_json"), "1 2"),
        _set(("outcome", "success", "output_json"), '{"a":1,"a":2}'),
        _set(("outcome", "success", "output_json"), 1),
        _set(("outcome",), {"failure": {"error": "E", "retryable": "yes"}}),
        _set(("outcome",), {"failure": {"error": "E", "retryable": False, "message": None}}),
        _set(("outcome",), {"failure": {"error": 3, "retryable": False}}),
        _set(("outcome",), {"failure": {"retryable": False}}),
        _set(("outcome",), {"suspended": {"reason": "x", "state_version": 1, "state_json": "1"}}),
        _set(
            ("outcome",),
            {"suspended": {"reason": "approval", "state_version": 1.5, "state_json": "1"}},
        ),
        _set(("outcome",), {"suspended": {"reason": "approval", "state_version": 1}}),
        CANONICAL.replace("support-0192", "support\\ud800"),
        CANONICAL.replace("on its way", "on its \\udc00way"),
    ],
)
def test_malformed_records_are_invalid_payloads(text: str) -> None:
    with pytest.raises(InvalidPayload):
        decode_record(text)


@pytest.mark.parametrize(
    "data",
    [b"\xff" + CANONICAL.encode(), CANONICAL.encode("utf-16"), b"\xc3", None, 42, ["x"]],
)
def test_non_text_or_non_utf8_is_an_invalid_payload(data: Any) -> None:
    with pytest.raises(InvalidPayload):
        decode_record(data)


def test_bytearray_is_accepted() -> None:
    assert encode_record(decode_record(bytearray(CANONICAL.encode()))) == CANONICAL


# -- properties ------------------------------------------------------------------------------

ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12
).filter(lambda s: len(s.encode()) <= 256)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
documents = json_values.map(lambda value: json.dumps(value, ensure_ascii=False, allow_nan=False))
invocations = st.builds(
    Invocation,
    run_id=ids,
    step_id=ids,
    sequence=st.integers(0, 2**63 - 1),
    kind=st.sampled_from(OperationKind),
    handler_id=ids,
    input_json=documents,
)
outcomes = st.one_of(
    st.builds(Success, documents),
    st.builds(Failure, ids, st.booleans(), st.text()),
    st.builds(Suspended, st.sampled_from(SuspendReason), st.integers(0, 2**63 - 1), documents),
)


@given(invocations, outcomes)
def test_round_trip_property(invocation: Invocation, outcome: Any) -> None:
    record = Record.for_invocation(invocation, outcome)
    text = encode_record(record)
    assert decode_record(text) == record
    assert decode_record(text.encode("utf-8")) == record
    assert encode_record(decode_record(text)) == text


# -- fuzz ------------------------------------------------------------------------------------

SAMPLES = [canonical(outcome) for outcome in OUTCOMES]
json_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.just([]),
    st.just({}),
    st.just({"success": {"output_json": "1"}}),
)


def _decode_or_format_error(data: str | bytes) -> None:
    """Decoding either yields a record that re-encodes, or raises a RecordFormatError."""
    try:
        record = decode_record(data)
    except RecordFormatError:
        return
    assert decode_record(encode_record(record)) == record


def _kind(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*prefix, key))
    return found


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_truncation(sample: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(sample) - 1))
    with pytest.raises(InvalidPayload):
        decode_record(sample[:cut])


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_flipped_and_inserted_bytes(sample: str, data: st.DataObject) -> None:
    raw = bytearray(sample.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        byte = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            raw[position] ^= byte or 1
        else:
            raw.insert(position, byte)
    _decode_or_format_error(bytes(raw))
    _decode_or_format_error(bytes(raw).decode("utf-8", errors="surrogateescape"))


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_swapped_types(sample: str, data: st.DataObject) -> None:
    tree_ = json.loads(sample)
    path = data.draw(st.sampled_from(_paths(tree_)[1:]))
    value = data.draw(json_junk)
    target = tree_
    for key in path[:-1]:
        target = target[key]
    if _kind(target[path[-1]]) == _kind(value):
        return  # same JSON type: not a swap
    target[path[-1]] = value
    with pytest.raises(RecordFormatError) as caught:
        decode_record(dump(tree_))
    if path == ("version",):
        assert type(caught.value) in (InvalidPayload, UnsupportedVersion)
    elif path == ("outcome",):
        assert type(caught.value) in (InvalidPayload, AmbiguousOutcome)
    elif path[0] == "input_digest" or path == ("invocation", "input_json"):
        assert type(caught.value) in (InvalidPayload, DigestMismatch)
    else:
        assert type(caught.value) in (InvalidPayload, UnknownField, AmbiguousOutcome)


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_inserted_unknown_fields(sample: str, data: st.DataObject) -> None:
    tree_ = json.loads(sample)
    objects = [path for path in _paths(tree_) if isinstance(_at(tree_, path), dict)]
    path = data.draw(st.sampled_from(objects))
    name = data.draw(st.text(min_size=1, max_size=8).filter(lambda n: n not in _at(tree_, path)))
    _at(tree_, path)[name] = data.draw(json_junk)
    expected = AmbiguousOutcome if path == ("outcome",) and name in _OUTCOMES else UnknownField
    with pytest.raises(expected):
        decode_record(dump(tree_))


_OUTCOMES = ("success", "failure", "suspended")


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


@given(st.sampled_from(SAMPLES), st.integers(2, 10**6))
def test_fuzz_future_versions(sample: str, version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        decode_record(sample.replace('{"version":1,', f'{{"version":{version},', 1))


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_duplicate_keys(sample: str, data: st.DataObject) -> None:
    keys = re.findall(r'"(\w+)":', sample)
    key = data.draw(st.sampled_from(keys))
    duplicated = sample.replace(f'"{key}":', f'"{key}":0,"{key}":', 1)
    with pytest.raises(InvalidPayload, match="duplicate"):
        decode_record(duplicated)


@given(st.sampled_from(SAMPLES), st.sampled_from(["NaN", "Infinity", "-Infinity"]), st.data())
def test_fuzz_non_finite_numbers(sample: str, constant: str, data: st.DataObject) -> None:
    tree_ = json.loads(sample)
    path = data.draw(st.sampled_from(_paths(tree_)[1:]))
    _at(tree_, path[:-1])[path[-1]] = "__CONSTANT__"
    with pytest.raises(InvalidPayload):
        decode_record(dump(tree_).replace('"__CONSTANT__"', constant))


@given(st.text(max_size=200))
def test_fuzz_arbitrary_text(text: str) -> None:
    _decode_or_format_error(text)


@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_character_edits(sample: str, data: st.DataObject) -> None:
    text = sample
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(text)))
        insert = data.draw(st.text(alphabet='{}[]",:\\0123456789.-eE tfnul\ud800', max_size=3))
        delete = data.draw(st.integers(0, 3))
        text = text[:position] + insert + text[position + delete :]
    _decode_or_format_error(text)


def test_decoded_record_is_independent_of_input_tree() -> None:
    data = tree()
    record = decode_record(dump(data))
    mutated = copy.deepcopy(data)
    mutated["invocation"]["sequence"] = 5
    assert record.invocation.sequence == 4
