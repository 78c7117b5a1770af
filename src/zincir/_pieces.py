"""An operation input cut into content pieces, and its digest, both computed incrementally.

A piece is an exact substring of the input: in an array (the input itself, or a member of
an object: a model request's ``messages`` and ``tools``), each element, or run of consecutive
elements, of at least :data:`PIECE_MIN_CHARS`; and each other member value of that size,
except an object, which is entered and cut the same way (a conversation held under another
key, as a tool's arguments hold it, is cut as at the top), or is one piece when nothing in
it is.
Concatenating the literal text between pieces and the pieces gives back the exact input, so
nothing depends on the cut being the "right" one, only on it being the same for the same
text. An input with no piece is short (its literal text is bounded).

A piece that holds a JSON string of at least :data:`TEXT_PIECE_MIN_CHARS` (a tool's long
result, say) is not stored whole: its node holds its text with each such string a piece
(``[…, literal, {"p": string}, literal]``), which a record's output or an event's payload
holding the same text shares (see :func:`text_pieces`).

Each piece also closes a *node*: ``[{"n": previous node}, literal before the piece,
{"p": piece}]``, content-addressed by the SHA-256 of its text. The node of the last piece
names the whole prefix, so an input is described as ``[{"n": node}, tail literal]``,
whatever its length, and two inputs that share a prefix share its nodes.

Keeping, per (run, step, kind), the previous input's layout and the SHA-256 state at each
piece's end, a new input that extends the previous one is cut and hashed from the last
shared piece on: its earlier messages are neither scanned, encoded nor hashed again. A new
process pays one full pass on its first input of each step. Which pieces are shared is known
without comparing when the code that joined both texts noted it (:mod:`zincir._prefixes`).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ._prefixes import take_shared

__all__ = [
    "PIECE_MIN_CHARS",
    "TEXT_PIECE_MIN_CHARS",
    "Expansions",
    "InputLayout",
    "Piece",
    "compose",
    "layout",
    "long_strings",
    "node_text",
    "parse_description",
    "text_pieces",
]

PIECE_MIN_CHARS: Final = 256
"""A member value or array element shorter than this stays in the literal text."""
TEXT_PIECE_MIN_CHARS: Final = 1024
"""A JSON string this long (quotes included) is a piece of its own wherever it stands."""
_LITERAL: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string literal: matched from a token boundary, it tokenises every string (outside
strings JSON has no quote), so long ones are found without parsing."""
_CACHED_STEPS: Final = 256
_CACHED_CHARS: Final = 64 * 1024 * 1024  # the layouts kept hold their texts alive
_CACHE_MIN_CHARS: Final = 4096  # shorter inputs are cut afresh: cheaper than keeping them
_WS: Final = " \t\n\r"
_DECODER: Final = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of an input: its span, its digest ("" when its node holds its text), the
    node it closes (digest and text), where the scan resumes after it, and the input's hash
    state at its end."""

    start: int
    end: int
    digest: str
    node: str
    node_text: str
    path: tuple[bool, ...]  # the containers open at its end (True: an array), outermost first
    state: Any  # a hashlib sha256 object holding the input's bytes up to ``end``
    strings: tuple[tuple[str, str], ...] = ()  # its long strings, when its node holds it

    def rows(self, text: str) -> list[tuple[str, str]]:
        """(digest, text) of the content rows this piece stands on, its node's last."""
        if self.strings:
            return [*self.strings, (self.node, self.node_text)]
        return [(self.digest, text[self.start : self.end]), (self.node, self.node_text)]


@dataclass(frozen=True, slots=True)
class InputLayout:
    """An input text cut into pieces, with its ``sha256:`` digest; ``reused`` pieces were
    carried over from the previous input of the same step (not scanned or hashed again)."""

    text: str
    pieces: tuple[Piece, ...]
    digest: str
    reused: int = 0

    def tail(self) -> tuple[str, str] | None:
        """(digest, text) of the literal after the last piece when it is long enough to be
        stored as a piece (a request's tools and settings, the same every turn)."""
        if not self.pieces:
            return None
        text = self.text[self.pieces[-1].end :]
        if len(text) < PIECE_MIN_CHARS:
            return None
        return _sha(text.encode("utf-8")), text

    def description(self) -> str:
        """The stored form of the input: its last node and the literal after it (or that
        literal's piece)."""
        if not self.pieces:
            return _dumps([self.text])
        last = self.pieces[-1]
        tail = self.tail()
        if tail is not None:
            return _dumps([{"n": last.node}, {"p": tail[0]}])
        return _dumps([{"n": last.node}, self.text[last.end :]])

    def new_content(self) -> list[tuple[str, str]]:
        """(digest, text) of every piece and node this layout did not reuse."""
        return self._content(self.pieces[self.reused :])

    def all_content(self) -> list[tuple[str, str]]:
        """(digest, text) of every piece and node of the input."""
        return self._content(self.pieces)

    def _content(self, pieces: Iterable[Piece]) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for piece in pieces:
            found.extend(piece.rows(self.text))
        tail = self.tail()
        if tail is not None:
            found.append(tail)
        return found


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def node_text(previous: str | None, literal: str, piece: str) -> str:
    """The text of the node closing ``piece`` after ``literal``, following ``previous``."""
    head: list[object] = [] if previous is None else [{"n": previous}]
    return _dumps([*head, literal, {"p": piece}])


def text_pieces(
    text: str, start: int = 0, end: int | None = None
) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """``text[start:end]`` (whole JSON values) with each JSON string of at least
    :data:`TEXT_PIECE_MIN_CHARS` cut out: its description ``[literal, {"p": digest}, …]``
    and the (digest, string) rows; None when it holds no such string."""
    stop = len(text) if end is None else end
    segments: list[object] = []
    rows: list[tuple[str, str]] = []
    at = start
    for begin, finish, digest in long_strings(text, start, stop):
        segments.extend((text[at:begin], {"p": digest}))
        rows.append((digest, text[begin:finish]))
        at = finish
    if not rows:
        return None
    segments.append(text[at:stop])
    return _dumps(segments), tuple(rows)


def long_strings(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int, str]]:
    """(start, end, SHA-256) of each JSON string of at least :data:`TEXT_PIECE_MIN_CHARS`
    in ``text[start:end]`` (whole JSON values)."""
    stop = len(text) if end is None else end
    return [
        (found.start(), found.end(), _sha(found.group().encode("utf-8")))
        for found in _LITERAL.finditer(text, start, stop)
        if found.end() - found.start() >= TEXT_PIECE_MIN_CHARS
    ]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Cut:
    """Scans an input from a resume point, cutting pieces and hashing as it goes."""

    def __init__(self, text: str, pieces: list[Piece], hasher: Any, at: int) -> None:
        self.text = text
        self.pieces = pieces
        self.hasher = hasher
        self.hashed = at  # the text before this index is in ``hasher``

    def add(self, start: int, end: int, path: tuple[bool, ...]) -> None:
        if end - start < PIECE_MIN_CHARS:
            return
        text = self.text
        previous = self.pieces[-1] if self.pieces else None
        literal = text[previous.end if previous else 0 : start]
        body = text[start:end].encode("utf-8")
        self.hasher.update(text[self.hashed : start].encode("utf-8"))
        self.hasher.update(body)
        self.hashed = end
        spans = long_strings(text, start, end) if end - start >= TEXT_PIECE_MIN_CHARS else []
        if len(spans) == 1 and spans[0][:2] == (start, end):
            spans = []  # the piece is one long string: stored as is, shared all the same
        strings: tuple[tuple[str, str], ...] = ()
        if spans:  # the node holds the piece's text, its long strings pieces
            segments: list[object] = [] if previous is None else [{"n": previous.node}]
            at = start
            for begin, finish, string in spans:
                segments.extend((literal + text[at:begin], {"p": string}))
                literal, at = "", finish
            segments.append(text[at:end])
            strings = tuple((string, text[begin:finish]) for begin, finish, string in spans)
            digest, node = "", _dumps(segments)
        else:
            digest = _sha(body)
            node = node_text(previous.node if previous else None, literal, digest)
        self.pieces.append(
            Piece(
                start,
                end,
                digest,
                _sha(node.encode("utf-8")),
                node,
                path,
                self.hasher.copy(),
                strings,
            )
        )


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WS:
        at += 1
    return at


def _value_end(text: str, at: int) -> int:
    return int(_DECODER.raw_decode(text, at)[1])


@dataclass(slots=True)
class _Frame:
    """A container the scan is inside: an array (its elements cut in runs) or an object
    (its members' values cut, or descended into); ``start`` and ``before`` (pieces cut
    before it) let an object with no piece inside become one piece as a whole."""

    array: bool
    start: int = -1
    before: int = -1  # -1: a resumed frame, which holds a piece already


def _scan(cut: _Cut, at: int, path: tuple[bool, ...]) -> None:
    """Cut the pieces of ``cut.text`` from ``at``: the start of the text (``path`` empty),
    or just after a piece inside the containers ``path`` names (True: an array).

    A top-level object or array is entered. In an array each element, or run of
    consecutive elements, of at least :data:`PIECE_MIN_CHARS` is a piece; in an object a
    member's array is entered, as is its object of that size (whatever the depth: a
    conversation under another key is cut as at the top), and its other values of that
    size are pieces. An entered object with no piece inside is one piece as a whole."""
    text = cut.text
    frames = [_Frame(array) for array in path]
    run: int | None = None  # where the array elements not yet in a piece begin
    state = "next"
    if not frames:
        at = _skip(text, 0)
        if not text.startswith(("{", "["), at):
            return
        frames.append(_Frame(text[at] == "[", at, len(cut.pieces)))
        at, state = _skip(text, at + 1), "first"
    while frames:
        frame = frames[-1]
        if state == "first":  # just inside the frame's opening bracket
            if text.startswith("]" if frame.array else "}", at):
                at, state = _close(cut, frames, at + 1), "next"
            else:
                state = "element" if frame.array else "member"
        elif state == "member":
            at = _skip(text, _value_end(text, at))  # the key
            if not text.startswith(":", at):
                return
            at = _skip(text, at + 1)
            if text.startswith("[", at):
                frames.append(_Frame(True, at, len(cut.pieces)))
                at, state, run = _skip(text, at + 1), "first", None
                continue
            end = _value_end(text, at)
            if text.startswith("{", at) and end - at >= PIECE_MIN_CHARS:
                frames.append(_Frame(False, at, len(cut.pieces)))
                at, state = _skip(text, at + 1), "first"
                continue
            cut.add(at, end, _path(frames))
            at, state = end, "next"
        elif state == "element":
            end = _value_end(text, at)
            run = at if run is None else run
            if end - run >= PIECE_MIN_CHARS:
                cut.add(run, end, _path(frames))
                run = None
            at, state = end, "next"
        else:  # next: after a value in the frame
            at = _skip(text, at)
            if text.startswith(",", at):
                at, state = _skip(text, at + 1), "element" if frame.array else "member"
            elif text.startswith("]" if frame.array else "}", at):
                at, run = _close(cut, frames, at + 1), None
            else:
                return


def _close(cut: _Cut, frames: list[_Frame], end: int) -> int:
    """Leave the innermost frame, its closing bracket ending at ``end``: an object entered
    for its size that holds no piece is one piece (a member's value) of the frame around."""
    frame = frames.pop()
    if not frame.array and frame.before == len(cut.pieces) and frames:
        cut.add(frame.start, end, _path(frames))
    return end


def _path(frames: list[_Frame]) -> tuple[bool, ...]:
    return tuple(frame.array for frame in frames)


def _cut(text: str, kept: tuple[Piece, ...]) -> InputLayout:
    """The layout of ``text``, resuming after ``kept`` (pieces of a prefix of ``text``)."""
    if kept:
        last = kept[-1]
        hasher, at, path = last.state.copy(), last.end, last.path
    else:
        hasher, at, path = hashlib.sha256(), 0, ()
    cut = _Cut(text, list(kept), hasher, at)
    try:
        _scan(cut, at, path)
    except (ValueError, IndexError, RecursionError):
        pass  # not JSON (or nested too deep) past here: the rest is literal text (every cut
        # reproduces the input)
    hasher = cut.hasher.copy()
    hasher.update(text[cut.hashed :].encode("utf-8"))
    return InputLayout(text, tuple(cut.pieces), "sha256:" + hasher.hexdigest(), len(kept))


def _shared(previous: InputLayout, text: str) -> tuple[Piece, ...]:
    """The leading pieces of ``previous`` whose text up to their end ``text`` also starts
    with: those within the prefix noted as shared when both texts were joined (see
    :mod:`zincir._prefixes`), then the last one tried (an input that only grew), else a
    binary search; a comparison starts where the noted prefix ends."""
    pieces, old = previous.pieces, previous.text
    if not pieces:
        return ()
    known = take_shared(text, old)  # text[:known] == old[:known]
    low = bisect.bisect_right(pieces, known, key=_end)
    if low == len(pieces) or _same(text, old, known, pieces[-1].end):
        return pieces
    high = len(pieces) - 1  # pieces[:low] shared; pieces[high] not
    while low < high:
        middle = (low + high) // 2
        if _same(text, old, known, pieces[middle].end):
            low = middle + 1
        else:
            high = middle
    return pieces[:low]


def _same(text: str, old: str, known: int, end: int) -> bool:
    """Whether ``text`` starts with ``old[:end]``, given that it starts with ``old[:known]``."""
    start = min(known, end)
    return text.startswith(old[start:end], start)


def _end(piece: Piece) -> int:
    return piece.end


_LAYOUTS: OrderedDict[tuple[str, str, str], InputLayout] = OrderedDict()
_HELD = 0  # characters of the texts in _LAYOUTS
_LOCK: Final = threading.Lock()


def layout(text: str, step: tuple[str, str, str] | None = None) -> InputLayout:
    """The layout of input ``text`` (valid UTF-8), continued from the previous input of
    ``step`` (run id, step id, kind) kept in this process when it is a prefix of ``text``."""
    if step is None or len(text) < _CACHE_MIN_CHARS:
        return _cut(text, ())
    with _LOCK:
        previous = _LAYOUTS.get(step)
    if previous is not None and previous.text is text:
        return previous
    if previous is not None and previous.text == text:
        return previous
    found = _cut(text, () if previous is None else _shared(previous, text))
    global _HELD
    with _LOCK:
        replaced = _LAYOUTS.pop(step, None)
        _HELD -= 0 if replaced is None else len(replaced.text)
        _LAYOUTS[step] = found
        _HELD += len(text)
        while len(_LAYOUTS) > 1 and (len(_LAYOUTS) > _CACHED_STEPS or _HELD > _CACHED_CHARS):
            _, dropped = _LAYOUTS.popitem(last=False)
            _HELD -= len(dropped.text)
    return found


def parse_description(text: str) -> list[Any]:
    """The segments of a stored description (or node): strings, ``{"p":…}`` (a piece) and
    ``{"n":…}`` (a node)."""
    segments = json.loads(text)
    if not isinstance(segments, list):
        raise ValueError("a content description is a JSON array")
    return segments


class Expansions(Protocol):
    """Remembers the text a node stands for (its whole prefix), within some bound."""

    def get(self, node: str) -> str | None: ...

    def put(self, node: str, text: str) -> None: ...


def compose(
    description: str,
    fetch: Callable[[Iterable[str]], Mapping[str, str]],
    expansions: Expansions | None = None,
) -> str:
    """The text a description stands for; ``fetch(digests)`` returns the stored text of
    pieces and nodes (a missing one raises KeyError). With ``expansions``, a node chain is
    walked back only to the newest node whose text is remembered (the previous request's),
    and the text of the description's first node is remembered in turn."""
    segments = parse_description(description)
    if expansions is not None and segments and _node_of(segments[0]) is not None:
        head = _chain(_node_of(segments[0]) or "", fetch, expansions)
        return head + _flat(segments[1:], fetch)
    return _flat(segments, fetch)


def _node_of(segment: Any) -> str | None:
    return segment.get("n") if isinstance(segment, dict) else None


def _chain(
    node: str, fetch: Callable[[Iterable[str]], Mapping[str, str]], expansions: Expansions
) -> str:
    """The text of ``node``: its chain walked back to a remembered node, then forward."""
    walked: list[list[Any]] = []
    current: str | None = node
    known = ""
    while current is not None:
        remembered = expansions.get(current)
        if remembered is not None:
            known = remembered
            break
        segments = parse_description(fetch((current,))[current])
        walked.append(segments)
        current = _node_of(segments[0]) if segments else None
    parts = [known]
    for segments in reversed(walked):
        rest = segments[1:] if segments and _node_of(segments[0]) is not None else segments
        parts.append(_flat(rest, fetch))
    text = "".join(parts)
    expansions.put(node, text)
    return text


def _flat(segments: list[Any], fetch: Callable[[Iterable[str]], Mapping[str, str]]) -> str:
    """The text of ``segments``, nodes among them expanded without remembering."""
    out: list[str] = []
    stack = list(reversed(segments))
    while stack:
        segment = stack.pop()
        if isinstance(segment, str):
            out.append(segment)
        elif "p" in segment:
            out.append(fetch((segment["p"],))[segment["p"]])
        else:
            node = segment["n"]
            stack.extend(reversed(parse_description(fetch((node,))[node])))
    return "".join(out)
