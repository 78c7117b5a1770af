"""Invocation: validation rules and limits, the stable key, the input digest, the dict form."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import dunder_all_order
from zincir._errors import InvalidInput, InvalidInvocation, ZincirError
from zincir.contract import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_ID_BYTES,
    MAX_SEQUENCE,
    Invocation,
    OperationKind,
)

ID_FIELDS = ("run_id", "step_id", "handler_id")


def make(**changes: Any) -> Invocation:
    fields: dict[str, Any] = {
        "run_id": "support-0192",
        "step_id": "model.request",
        "sequence": 4,
        "kind": OperationKind.MODEL_REQUEST,
        "handler_id": "support-agent",
        "input_json": '{"prompt":"Where is my order?"}',
    }
    fields.update(changes)
    return Invocation(**fields)


def rejected(invocation: Invocation, fragment: str, **kwargs: Any) -> None:
    with pytest.raises(InvalidInvocation, match=re.escape(fragment)):
        invocation.validate(**kwargs)


def test_spec_example_validates() -> None:
    invocation = make()
    invocation.validate()
    assert invocation.stable_key() == "support-0192/model.request/4"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", invocation.input_digest())


def test_operation_kind_is_closed_with_exact_values() -> None:
    assert {kind.name: kind.value for kind in OperationKind} == {
        "MODEL_REQUEST": "model_request",
        "MODEL_STREAM": "model_stream",
        "TOOL_CALL": "tool_call",
        "MCP_REQUEST": "mcp_request",
        "EVENT_DELIVERY": "event_delivery",
        "RETRY_DELAY": "retry_delay",
        "APPROVAL_RESUME": "approval_resume",
    }
    assert OperationKind.TOOL_CALL == "tool_call"


def test_constructing_never_validates() -> None:
    invocation = Invocation("", "", -1, "nope", "", "not json")
    with pytest.raises(InvalidInvocation):
        invocation.validate()


def test_validate_names_every_broken_rule() -> None:
    with pytest.raises(InvalidInvocation) as caught:
        Invocation("", "s", -1, "nope", "h", "{").validate()
    message = str(caught.value)
    for fragment in ("run_id must not be empty", "sequence must be in", "kind must be", "input"):
        assert fragment in message


def test_error_carries_the_run_id() -> None:
    with pytest.raises(InvalidInvocation) as caught:
        make(sequence=-1).validate()
    assert caught.value.run_id == "support-0192"
    assert "[run support-0192]" in str(caught.value)
    assert isinstance(caught.value, InvalidInput)
    assert isinstance(caught.value, ZincirError)


def test_plain_string_kind_becomes_the_enum() -> None:
    invocation = make(kind="tool_call")
    assert invocation.kind is OperationKind.TOOL_CALL
    assert invocation == make(kind=OperationKind.TOOL_CALL)
    invocation.validate()


@pytest.mark.parametrize("kind", ["nope", "MODEL_REQUEST", "", "Tool_Call", 3, None])
def test_unknown_kind_is_rejected(kind: Any) -> None:
    rejected(make(kind=kind), "kind must be one of")


# -- ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ID_FIELDS)
def test_id_of_exactly_256_bytes_is_accepted(field: str) -> None:
    make(**{field: "a" * MAX_ID_BYTES}).validate()


@pytest.mark.parametrize("field", ID_FIELDS)
def test_id_of_257_bytes_is_rejected(field: str) -> None:
    rejected(make(**{field: "a" * (MAX_ID_BYTES + 1)}), f"{field} is 257 bytes")


@pytest.mark.parametrize("field", ID_FIELDS)
def test_multibyte_characters_count_in_bytes(field: str) -> None:
    make(**{field: "é" * 128}).validate()  # 256 bytes, 128 characters
    rejected(make(**{field: "é" * 128 + "a"}), f"{field} is 257 bytes")
    rejected(make(**{field: "€" * 86}), f"{field} is 258 bytes")  # 86 characters
    make(**{field: "🦆" * 64}).validate()
    rejected(make(**{field: "🦆" * 65}), "bytes")


@pytest.mark.parametrize("field", ID_FIELDS)
def test_empty_id_is_rejected(field: str) -> None:
    rejected(make(**{field: ""}), f"{field} must not be empty")


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("char", ["\x00", "\t", "\n", "\x1f", "\x7f", "\x80", "\x85", "\x9f"])
def test_control_characters_are_rejected(field: str, char: str) -> None:
    rejected(make(**{field: f"a{char}b"}), "control character")


@pytest.mark.parametrize("field", ID_FIELDS)
def test_printable_unicode_and_separators_are_allowed(field: str) -> None:
    make(**{field: "a/b%2F c\xa0ü.ş:🦆\u2028"}).validate()


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("value", [None, 1, b"run", ["a"]])
def test_non_string_id_is_rejected(field: str, value: Any) -> None:
    rejected(make(**{field: value}), f"{field} must be a str")


@pytest.mark.parametrize("field", ID_FIELDS)
def test_lone_surrogate_in_id_is_rejected(field: str) -> None:
    rejected(make(**{field: "a\ud800"}), "UTF-8")


# -- sequence --------------------------------------------------------------------------------


@pytest.mark.parametrize("sequence", [0, 1, MAX_SEQUENCE])
def test_sequence_in_range_is_accepted(sequence: int) -> None:
    assert MAX_SEQUENCE == 2**63 - 1
    make(sequence=sequence).validate()


@pytest.mark.parametrize("sequence", [-1, 2**63, 2**64, -(2**63)])
def test_sequence_out_of_range_is_rejected(sequence: int) -> None:
    rejected(make(sequence=sequence), "sequence must be in 0..2**63-1")


@pytest.mark.parametrize("sequence", [True, False, 1.0, "1", None])
def test_sequence_of_wrong_type_is_rejected(sequence: Any) -> None:
    rejected(make(sequence=sequence), "sequence must be an int")


# -- input_json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document", ["{}", "[]", "1", '"x"', "null", "true", " {\n} ", '{"a":[1,2.5e3,null]}', "-0"]
)
def test_any_single_json_document_is_accepted(document: str) -> None:
    make(input_json=document).validate()


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ("", "not exactly one strict JSON document"),
        ("   ", "not exactly one"),
        ("{} {}", "not exactly one"),
        ("{}x", "not exactly one"),
        ('{"a":1}\n{"b":2}', "not exactly one"),
        ("NaN", "NaN is not valid JSON"),
        ('{"a":NaN}', "NaN"),
        ('{"a":Infinity}', "Infinity"),
        ("[-Infinity]", "Infinity"),
        ('{"a":1,"a":2}', "duplicate object key 'a'"),
        ('{"x":{"a":1,"a":1}}', "duplicate object key"),
        ("{'a':1}", "not exactly one"),
        ('{"a":1,}', "not exactly one"),
        ('"\x01"', "not exactly one"),
        ("\ufeff{}", "not exactly one"),
        ("[" * 100_000 + "]" * 100_000, "not exactly one"),
    ],
)
def test_invalid_input_documents_are_rejected(document: str, why: str) -> None:
    rejected(make(input_json=document), why)


@pytest.mark.parametrize("document", [None, b"{}", {"a": 1}, 1])
def test_non_string_input_is_rejected(document: Any) -> None:
    rejected(make(input_json=document), "input_json must be a str")


def test_lone_surrogate_in_input_is_rejected_but_escape_is_fine() -> None:
    rejected(make(input_json='"\ud800"'), "UTF-8")
    make(input_json='"\\ud800"').validate()


def _document_of(size: int, fill: str = "a") -> str:
    """A JSON string document of exactly ``size`` UTF-8 bytes."""
    body = fill * ((size - 2) // len(fill.encode()))
    document = json.dumps(body, ensure_ascii=False)
    assert len(document.encode()) == size
    return document


def test_default_input_limit_is_one_mebibyte() -> None:
    assert DEFAULT_MAX_INPUT_BYTES == 1_048_576
    make(input_json=_document_of(DEFAULT_MAX_INPUT_BYTES)).validate()
    rejected(
        make(input_json=_document_of(DEFAULT_MAX_INPUT_BYTES + 1)),
        "input_json is 1048577 bytes; the limit is 1048576",
    )


def test_input_limit_counts_utf8_bytes() -> None:
    document = _document_of(2 + 3 * 10, fill="€")  # 12 characters, 32 bytes
    make(input_json=document).validate(max_input_bytes=32)
    rejected(make(input_json=document), "32 bytes; the limit is 31", max_input_bytes=31)


def test_input_limit_is_configurable() -> None:
    big = _document_of(DEFAULT_MAX_INPUT_BYTES + 10)
    make(input_json=big).validate(max_input_bytes=2 * DEFAULT_MAX_INPUT_BYTES)
    make(input_json=big).validate(max_input_bytes=None)
    make(input_json="[1]").validate(max_input_bytes=3)
    rejected(make(input_json="[1]"), "the limit is 2", max_input_bytes=2)
    make(input_json="[1]").validate(3)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10"])
def test_invalid_input_limit_is_rejected(limit: Any) -> None:
    with pytest.raises(InvalidInput, match="max_input_bytes must be a positive int"):
        make().validate(max_input_bytes=limit)


# -- stable key ------------------------------------------------------------------------------


def test_stable_key_examples() -> None:
    assert make(run_id="a/b", step_id="c", sequence=1).stable_key() == "a%2Fb/c/1"
    assert make(run_id="a", step_id="b/c", sequence=1).stable_key() == "a/b%2Fc/1"
    assert make(run_id="50%", step_id="%2F", sequence=0).stable_key() == "50%25/%252F/0"


def test_stable_key_depends_only_on_the_identity() -> None:
    key = make().stable_key()
    assert make(kind="tool_call", handler_id="other", input_json="[]").stable_key() == key
    assert make(sequence=5).stable_key() != key


@pytest.mark.parametrize(
    "changes", [{"run_id": None}, {"step_id": 3}, {"sequence": "4"}, {"sequence": True}]
)
def test_stable_key_of_wrong_types_is_an_invocation_error(changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidInvocation, match="no stable key"):
        make(**changes).stable_key()


def _unescape(part: str) -> str:
    assert "/" not in part
    return part.replace("%2F", "/").replace("%25", "%")


def _parse_key(key: str) -> tuple[str, str, int]:
    """Invert the documented key format; its existence proves the key is injective."""
    run, step, sequence = key.split("/")
    return _unescape(run), _unescape(step), int(sequence)


tricky = st.text(alphabet="/%2F5a", max_size=8)
ids = st.one_of(tricky, st.text(max_size=20))
sequences = st.integers(min_value=0, max_value=MAX_SEQUENCE)


@given(ids, ids, sequences)
def test_stable_key_decodes_back_to_its_identity(run: str, step: str, sequence: int) -> None:
    key = make(run_id=run, step_id=step, sequence=sequence).stable_key()
    assert _parse_key(key) == (run, step, sequence)


@given(ids, ids, sequences, ids, ids, sequences)
def test_stable_key_is_injective(
    run_a: str, step_a: str, seq_a: int, run_b: str, step_b: str, seq_b: int
) -> None:
    key_a = make(run_id=run_a, step_id=step_a, sequence=seq_a).stable_key()
    key_b = make(run_id=run_b, step_id=step_b, sequence=seq_b).stable_key()
    assert (key_a == key_b) == ((run_a, step_a, seq_a) == (run_b, step_b, seq_b))


@given(st.lists(st.tuples(tricky, tricky, st.integers(0, 3)), min_size=2, max_size=30))
def test_stable_keys_of_many_tricky_identities_never_collide(
    identities: list[tuple[str, str, int]],
) -> None:
    keys = {make(run_id=r, step_id=s, sequence=n).stable_key() for r, s, n in identities}
    assert len(keys) == len(set(identities))


# -- digest ----------------------------------------------------------------------------------


def test_input_digest_is_sha256_of_utf8_bytes() -> None:
    document = '{"prompt":"Sipariş nerede?"}'
    expected = "sha256:" + hashlib.sha256(document.encode("utf-8")).hexdigest()
    assert make(input_json=document).input_digest() == expected


def test_input_digest_binds_exact_bytes() -> None:
    assert make(input_json='{"a":1}').input_digest() != make(input_json='{"a": 1}').input_digest()


@pytest.mark.parametrize("document", [None, '"\udfff"'])
def test_input_digest_of_unencodable_input_is_an_invocation_error(document: Any) -> None:
    with pytest.raises(InvalidInvocation, match="no input digest"):
        make(input_json=document).input_digest()


# -- dict form, immutability -----------------------------------------------------------------


def test_dict_form_round_trips_through_json() -> None:
    invocation = make()
    data = invocation.to_dict()
    assert list(data) == ["run_id", "step_id", "sequence", "kind", "handler_id", "input_json"]
    assert data["kind"] == "model_request" and type(data["kind"]) is str
    assert Invocation.from_dict(json.loads(json.dumps(data))) == invocation


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.pop("kind"), "missing keys 'kind'"),
        (lambda d: d.update(extra=1), "unknown keys 'extra'"),
        (lambda d: d.update(sequence="4"), "sequence must be an int"),
        (lambda d: d.update(sequence=True), "sequence must be an int"),
        (lambda d: d.update(run_id=None), "run_id must be a str"),
        (lambda d: d.update(input_json={"a": 1}), "input_json must be a str"),
    ],
)
def test_from_dict_is_strict(mutate: Any, fragment: str) -> None:
    data = make().to_dict()
    mutate(data)
    with pytest.raises(InvalidInvocation, match=re.escape(fragment)):
        Invocation.from_dict(data)


@pytest.mark.parametrize("value", [None, [], "x", 1])
def test_from_dict_rejects_non_mappings(value: Any) -> None:
    with pytest.raises(InvalidInvocation, match="must be a JSON object"):
        Invocation.from_dict(value)


def test_from_dict_does_not_check_limits() -> None:
    invocation = Invocation.from_dict(make(sequence=-1).to_dict())
    with pytest.raises(InvalidInvocation):
        invocation.validate()


def test_invocation_is_frozen_slotted_and_hashable() -> None:
    invocation = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        invocation.sequence = 5  # type: ignore[misc]
    assert not hasattr(invocation, "__dict__")
    assert len({invocation, make(kind="model_request")}) == 1


junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=300),
    st.binary(max_size=10),
    st.lists(st.integers(), max_size=3),
)


@given(st.tuples(junk, junk, junk, junk, junk, junk))
def test_validate_only_ever_raises_invalid_invocation(values: tuple[Any, ...]) -> None:
    invocation = Invocation(*values)
    try:
        invocation.validate()
    except InvalidInvocation:
        pass
    for method in (invocation.stable_key, invocation.input_digest):
        try:
            method()
        except InvalidInvocation:
            pass


def test_contract_exports_are_sorted_and_present() -> None:
    import zincir.contract
    import zincir.contract.payloads
    import zincir.payloads

    for module in (zincir.contract, zincir.contract.payloads, zincir.payloads):
        assert module.__all__ == dunder_all_order(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), name
