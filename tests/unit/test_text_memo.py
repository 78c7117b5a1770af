"""Work done once per text: the TextMemo, documents read back as the object just written,
strict JSON known from ``dumps``, and invocations and successes validated once."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import uuid

import pytest

from zincir import InvalidDocument, InvalidInput, InvalidInvocation, InvalidPayload
from zincir._json import dumps, known_strict
from zincir._memo import TextMemo
from zincir.contract import Invocation, OperationKind, Record, Success
from zincir.contract.payloads import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolOutput,
)


def text(n: int, size: int = 10) -> str:
    """A distinct text of exactly ``size`` characters."""
    return f"{n:0{size}d}"


# -- TextMemo --------------------------------------------------------------------------------


def test_the_oldest_entry_leaves_past_the_entry_bound() -> None:
    memo: TextMemo[int] = TextMemo(entries=3, chars=1000)
    for n in range(4):
        memo.put(text(n), n)
    assert memo.get(text(0)) is None
    assert [memo.get(text(n)) for n in (1, 2, 3)] == [1, 2, 3]


def test_the_oldest_entries_leave_past_the_character_bound() -> None:
    memo: TextMemo[int] = TextMemo(entries=100, chars=40)  # texts of up to 10 characters
    for n in range(4):
        memo.put(text(n), n)  # 40 characters in all: every one fits
    assert [memo.get(text(n)) for n in range(4)] == [0, 1, 2, 3]
    memo.put(text(4, size=5), 4)  # 45 characters: the oldest goes
    assert memo.get(text(0)) is None
    assert [memo.get(text(n)) for n in (1, 2, 3)] == [1, 2, 3]
    assert memo.get(text(4, size=5)) == 4
    memo.put(text(5), 5)  # 45 - 10 + 10 = 45: text(1), the least recently used, goes
    assert memo.get(text(1)) is None
    assert memo.get(text(5)) == 5


def test_a_text_over_a_quarter_of_the_characters_is_never_kept() -> None:
    memo: TextMemo[str] = TextMemo(entries=10, chars=40)
    memo.put(text(1, size=10), "fits")
    memo.put(text(2, size=11), "too large")
    assert memo.get(text(1, size=10)) == "fits"
    assert memo.get(text(2, size=11)) is None
    # the refused text evicted nothing either
    for n in range(3, 6):
        memo.put(text(n), "more")
    assert memo.get(text(1, size=10)) == "fits"


def test_a_text_under_the_smallest_size_is_never_kept() -> None:
    memo: TextMemo[str] = TextMemo(entries=10, chars=1000, smallest=5)
    memo.put("abcd", "short")
    memo.put("abcde", "long enough")
    assert memo.get("abcd") is None
    assert memo.get("abcde") == "long enough"


def test_get_makes_an_entry_the_most_recently_used() -> None:
    memo: TextMemo[int] = TextMemo(entries=2, chars=1000)
    memo.put(text(0), 0)
    memo.put(text(1), 1)
    assert memo.get(text(0)) == 0  # now text(1) is the oldest
    memo.put(text(2), 2)
    assert memo.get(text(1)) is None
    assert memo.get(text(0)) == 0 and memo.get(text(2)) == 2


def test_a_miss_does_not_change_the_order() -> None:
    memo: TextMemo[int] = TextMemo(entries=2, chars=1000)
    memo.put(text(0), 0)
    memo.put(text(1), 1)
    assert memo.get(text(9)) is None
    memo.put(text(2), 2)
    assert memo.get(text(0)) is None and memo.get(text(1)) == 1


def test_putting_a_known_text_again_counts_its_characters_once() -> None:
    memo: TextMemo[int] = TextMemo(entries=10, chars=40)
    for _ in range(5):
        memo.put(text(0), 0)
    for n in (1, 2, 3):
        memo.put(text(n), n)  # 40 characters, if text(0) was counted once
    assert [memo.get(text(n)) for n in range(4)] == [0, 1, 2, 3]


def test_putting_a_known_text_again_makes_it_the_most_recent() -> None:
    memo: TextMemo[int] = TextMemo(entries=2, chars=1000)
    memo.put(text(0), 0)
    memo.put(text(1), 1)
    memo.put(text(0), 0)
    memo.put(text(2), 2)
    assert memo.get(text(1)) is None
    assert memo.get(text(0)) == 0


def test_concurrent_threads_keep_both_bounds() -> None:
    entries, chars = 16, 400
    memo: TextMemo[int] = TextMemo(entries=entries, chars=chars)
    written = [text(t * 1000 + n, size=5 + n % 6) for t in range(8) for n in range(300)]
    errors: list[BaseException] = []

    def work(part: list[str]) -> None:
        try:
            for value, key in enumerate(part):
                memo.put(key, value)
                memo.get(key)
                memo.get(part[value // 2])
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(written[t::8],)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    kept = [key for key in written if memo.get(key) is not None]
    assert 0 < len(kept) <= entries
    assert sum(len(key) for key in kept) <= chars


class CountedHash(str):
    """A text that counts how often it is hashed."""

    hashed = 0

    def __hash__(self) -> int:
        CountedHash.hashed += 1
        return str.__hash__(self)


def test_a_long_text_is_kept_without_hashing_it_and_found_by_identity_or_equality() -> None:
    memo: TextMemo[int] = TextMemo(entries=10, chars=1 << 24)
    long = CountedHash("x" * (1 << 17))
    CountedHash.hashed = 0
    memo.put(long, 1)
    assert memo.get(long) == 1
    assert CountedHash.hashed == 0  # a request's text read back: no pass to hash it
    assert memo.get("x" * (1 << 17)) == 1  # an equal text read from elsewhere
    assert memo.get("y" * (1 << 17)) is None and memo.get("x" * ((1 << 17) + 1)) is None


def test_long_texts_keep_their_own_bounds() -> None:
    memo: TextMemo[int] = TextMemo(entries=2, chars=1 << 24)
    longs = [text(n, size=1 << 16) for n in range(20)]
    for n, key in enumerate(longs):
        memo.put(key, n)
    assert [memo.get(key) for key in longs[:4]] == [None] * 4  # the latest 16 are kept
    assert [memo.get(key) for key in longs[4:]] == list(range(4, 20))
    memo.put(text(0), 0)
    memo.put(text(1), 1)
    memo.put(text(2), 2)  # the short texts' entry bound leaves the long texts be
    assert memo.get(longs[-1]) == 19 and memo.get(text(0)) is None
    small: TextMemo[int] = TextMemo(chars=6 << 16)  # long texts within half the characters
    for n, key in enumerate(longs[:5]):
        small.put(key, n)
    assert [small.get(key) for key in longs[:5]] == [None, None, 2, 3, 4]


# -- documents read back as the object just written --------------------------------------------


def response(tag: str) -> ModelResponse:
    return ModelResponse(
        parts=[
            TextPart(text=f"answer {tag}"),
            ToolCallPart(tool_call_id=f"call-{tag}", tool_name="lookup", arguments={"q": tag}),
        ]
    )


def test_a_written_text_reads_back_as_the_same_document() -> None:
    document = response(uuid.uuid4().hex)
    written = document.to_json()
    assert ModelResponse.from_json(written) is document


def test_a_read_text_reads_back_as_the_same_document() -> None:
    document = response(uuid.uuid4().hex)
    spaced = json.dumps(document.to_dict())  # not the text to_json wrote
    assert spaced != document.to_json()
    first = ModelResponse.from_json(spaced)
    assert first == document and first is not document
    assert ModelResponse.from_json(spaced) is first


def test_another_class_parses_the_text_itself() -> None:
    tag = uuid.uuid4().hex
    output = ToolOutput(tool_call_id=f"call-{tag}", tool_name="lookup", content={"n": 1})
    written = output.to_json()
    with pytest.raises(InvalidDocument, match="ModelResponse"):
        ModelResponse.from_json(written)
    assert ToolOutput.from_json(written) is output  # the failed read forgot nothing


def test_a_text_valid_for_two_classes_gives_each_class_its_own_document() -> None:
    request = ModelRequest(messages=[], model=f"m-{uuid.uuid4().hex}")
    written = request.to_json()

    class OtherRequest(ModelRequest):
        """The same fields under another class."""

    other = OtherRequest.from_json(written)
    assert type(other) is OtherRequest and other == OtherRequest(messages=[], model=request.model)
    assert ModelRequest.from_json(written) is request


def test_bytes_are_read_as_before() -> None:
    document = response(uuid.uuid4().hex)
    written = document.to_json()
    read = ModelResponse.from_json(written.encode("utf-8"))
    assert read == document and type(read) is ModelResponse
    with pytest.raises(InvalidDocument):
        ToolOutput.from_json(written.encode("utf-8"))
    with pytest.raises(InvalidDocument, match="strict JSON"):
        ModelResponse.from_json(b"\xff\xfe")


def test_a_bad_text_is_refused_every_time() -> None:
    bad = '{"parts":[],"parts":[]}'
    for _ in range(2):
        with pytest.raises(InvalidDocument, match="duplicate"):
            ModelResponse.from_json(bad)


def test_dumps_output_is_known_strict_when_remembered() -> None:
    tag = uuid.uuid4().hex
    written = dumps({"tag": tag, "n": [1, 2.5, None, True]}, remember=True)
    assert known_strict(written)
    assert not known_strict(dumps({"tag": tag, "n": [2]}))  # not kept unless asked
    assert not known_strict(f'{{"tag": "{tag}", "n": [1, 2.5, null, true]}}')
    assert not known_strict(f'{{"tag":"{tag}","tag":"{tag}"}}')


# -- invocations and successes checked once ----------------------------------------------------


def invocation(input_json: str, sequence: int = 0) -> Invocation:
    return Invocation("run-memo", "tool.call", sequence, OperationKind.TOOL_CALL, "h", input_json)


def test_a_validated_invocation_still_honours_a_smaller_bound() -> None:
    document = '{"data":"' + "x" * 100 + '"}'
    size = len(document.encode("utf-8"))
    checked = invocation(document)
    checked.validate()
    checked.validate(max_input_bytes=size)
    checked.validate(max_input_bytes=None)
    for _ in range(2):
        with pytest.raises(InvalidInvocation, match=f"input_json is {size} bytes; the limit is 10"):
            checked.validate(max_input_bytes=10)
    fresh = invocation(document)
    with pytest.raises(InvalidInvocation, match=f"input_json is {size} bytes; the limit is 10"):
        fresh.validate(max_input_bytes=10)
    fresh.validate()  # a refused validation remembered nothing: it passes when it fits


def test_a_validated_invocation_still_checks_its_bound_argument() -> None:
    checked = invocation('{"a":1}')
    checked.validate()
    with pytest.raises(InvalidInput, match="max_input_bytes must be a positive int"):
        checked.validate(max_input_bytes=0)


def test_an_invalid_invocation_is_refused_every_time() -> None:
    broken = invocation('{"a":1,"a":2}')
    for _ in range(2):
        with pytest.raises(InvalidInvocation, match="duplicate object key"):
            broken.validate()


def test_the_input_digest_is_stable() -> None:
    checked = invocation('{"b":"é"}')
    expected = "sha256:" + hashlib.sha256('{"b":"é"}'.encode()).hexdigest()
    assert checked.input_digest() == expected
    assert checked.input_digest() == expected
    checked.validate()
    assert checked.input_digest() == expected == invocation('{"b":"é"}').input_digest()


def test_equality_and_hash_ignore_what_was_checked() -> None:
    checked, plain = invocation('{"a":1}'), invocation('{"a":1}')
    checked.validate()
    checked.input_digest()
    assert checked == plain and hash(checked) == hash(plain)
    assert plain in {checked}
    assert repr(checked) == repr(plain)
    assert checked != invocation('{"a":1}', sequence=1)


def test_replace_gives_an_invocation_checked_afresh() -> None:
    checked = invocation('{"a":1}')
    checked.validate()
    checked.input_digest()
    same = dataclasses.replace(checked)
    assert same == checked and hash(same) == hash(checked)
    moved = dataclasses.replace(checked, sequence=7)
    assert moved.sequence == 7 and moved.input_digest() == checked.input_digest()
    moved.validate()
    grown = dataclasses.replace(checked, input_json='{"a":"' + "y" * 50 + '"}')
    assert grown.input_digest() != checked.input_digest()
    with pytest.raises(InvalidInvocation, match="the limit is 20"):
        grown.validate(max_input_bytes=20)
    broken = dataclasses.replace(checked, input_json="{not json")
    with pytest.raises(InvalidInvocation, match="not exactly one strict JSON document"):
        broken.validate()


def test_a_success_is_checked_once_and_a_bad_one_every_time() -> None:
    good = Success('{"ok":true}')
    assert good._problems() == []
    assert good._problems() == []
    bad = Success('{"ok":tru}')
    for _ in range(2):
        [problem] = bad._problems()
        assert "output_json is not exactly one strict JSON document" in problem
    record = Record.for_invocation(invocation('{"a":1}'), bad)
    for _ in range(2):
        with pytest.raises(InvalidPayload, match="record success"):
            record.validate()


def test_success_equality_and_hash_ignore_the_check() -> None:
    checked, plain = Success('"x"'), Success('"x"')
    assert checked._problems() == []
    assert checked == plain and hash(checked) == hash(plain)
    assert repr(checked) == repr(plain)
    assert dataclasses.replace(checked, output_json="nope")._problems() != []
