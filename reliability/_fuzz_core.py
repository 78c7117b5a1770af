"""The fuzzing machinery the bad-input scenario shares: a tally per target and a byte mutator.

A :class:`Tally` counts what one entry point did with its inputs (accepted, refused with the
documented error, or anything else) and keeps the first few untyped errors as evidence. The
:class:`Mutator` turns valid encoded inputs into broken ones (bit flips, truncations,
splices, inserted JSON tokens, structural edits) deterministically from a seed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HANG_SECONDS", "Mutator", "Tally", "json_values"]

HANG_SECONDS = 2.0
"""One input taking longer than this counts as a hang."""

_SAMPLES = 5

_TOKENS: tuple[bytes, ...] = (
    b"null",
    b"true",
    b"false",
    b"0",
    b"-0",
    b"1e999",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"9" * 5000,
    b"0.1e-99999",
    b'""',
    b'"\\ud800"',
    b'"\\udc80x"',
    b'"\\u0000"',
    b"\\",
    b"{}",
    b"[]",
    b"[" * 3000,
    b"{" * 50,
    b'{"a":1,"a":2}',
    b",",
    b":",
    b'"version":2',
    b'"extra":1',
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    b"\x00",
    b" \t\r\n",
)
_BYTES = b'{}[],:"\\ 0123456789aeflnrstu-.+eE\x00\x7f\x80\xff'


@dataclass
class Tally:
    """What one target did with its inputs; ``untyped`` must stay empty."""

    name: str
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    untyped: int = 0
    hangs: int = 0
    slowest: float = 0.0
    samples: list[str] = field(default_factory=list)

    def call(
        self, allowed: tuple[type[BaseException], ...], fn: Callable[..., Any], *args: Any
    ) -> Any:
        """Run ``fn(*args)`` once: its result, or None when it raised (counted either way)."""
        self.tried += 1
        started = time.perf_counter()
        try:
            result = fn(*args)
        except allowed:
            self.refused += 1
            result = None
        except Exception as error:  # the finding this scenario exists to count
            self.untyped += 1
            self.note(f"{type(error).__name__}: {error}"[:300])
            result = None
        else:
            self.accepted += 1
        self.timed(time.perf_counter() - started)
        return result

    def timed(self, seconds: float) -> None:
        """Record how long one input took (a hang past :data:`HANG_SECONDS`)."""
        self.slowest = max(self.slowest, seconds)
        if seconds > HANG_SECONDS:
            self.hangs += 1

    def note(self, text: str) -> None:
        """Keep one piece of evidence (the first few only)."""
        if len(self.samples) < _SAMPLES:
            self.samples.append(text)

    def merge(self, other: Tally) -> None:
        """Add another tally's counts to this one."""
        self.tried += other.tried
        self.accepted += other.accepted
        self.refused += other.refused
        self.untyped += other.untyped
        self.hangs += other.hangs
        self.slowest = max(self.slowest, other.slowest)
        for sample in other.samples:
            self.note(sample)


class Mutator:
    """Deterministic mutations of valid inputs, mostly byte-level, some JSON-structural."""

    def __init__(self, seeds: list[bytes], rng: random.Random) -> None:
        self.seeds = seeds
        self.rng = rng

    def mutate(self) -> bytes:
        """One broken input: one to three edits of a random seed."""
        data = bytearray(self.rng.choice(self.seeds))
        for _ in range(self.rng.choice((1, 1, 1, 2, 3))):
            data = self._edit(data)
        return bytes(data)

    def _edit(self, data: bytearray) -> bytearray:
        rng = self.rng
        size = len(data)
        where = rng.randrange(size + 1) if size else 0
        choice = rng.randrange(9)
        if choice == 0 and size:  # flip one to four bits
            for _ in range(rng.randint(1, 4)):
                spot = rng.randrange(size)
                data[spot] ^= 1 << rng.randrange(8)
        elif choice == 1 and size:  # overwrite a byte with a JSON-significant one
            data[rng.randrange(size)] = rng.choice(_BYTES)
        elif choice == 2:  # truncate
            del data[where:]
        elif choice == 3 and size:  # delete a slice
            del data[where : where + rng.randint(1, 16)]
        elif choice == 4 and size:  # duplicate a slice
            start = rng.randrange(size)
            data[where:where] = data[start : start + rng.randint(1, 32)]
        elif choice == 5:  # splice with another seed
            other = rng.choice(self.seeds)
            data = data[:where] + other[rng.randrange(len(other) + 1) :]
        elif choice == 6:  # insert a token
            data[where:where] = rng.choice(_TOKENS)
        elif choice == 7:  # replace a token-sized run with a token
            data[where : where + rng.randint(1, 8)] = rng.choice(_TOKENS)
        else:
            data = bytearray(self._structural(bytes(data)))
        return data

    def _structural(self, data: bytes) -> bytes:
        """Replace, drop or add one value somewhere in the parsed document."""
        try:
            tree = json.loads(data)
        except (ValueError, RecursionError):
            return data
        rng = self.rng
        spots: list[tuple[Any, Any]] = []
        pending: list[Any] = [tree]
        while pending:
            node = pending.pop()
            keys: list[Any] = (
                list(node)
                if isinstance(node, dict)
                else list(range(len(node)))
                if isinstance(node, list)
                else []
            )
            for key in keys:
                spots.append((node, key))
                pending.append(node[key])
        if not spots:
            return json.dumps(rng.choice(json_values(rng, 2))).encode("utf-8", "surrogatepass")
        node, key = rng.choice(spots)
        action = rng.randrange(3)
        if action == 0:
            node[key] = rng.choice(json_values(rng, 2))
        elif action == 1:
            del node[key]
        elif isinstance(node, dict):
            node[rng.choice(("extra", "version", "x" * 300, "", "\u0000"))] = None
        else:
            node.append(rng.choice(json_values(rng, 1)))
        text = json.dumps(tree, ensure_ascii=rng.random() < 0.5)
        return text.encode("utf-8", "surrogatepass")


def json_values(rng: random.Random, depth: int) -> list[Any]:
    """A handful of JSON values of every type, nested up to ``depth``."""
    scalars: list[Any] = [
        None,
        True,
        False,
        0,
        -1,
        2**63,
        -(2**70),
        1.5,
        -0.0,
        1e308,
        "",
        "x",
        "\u0000",
        "\ud800",
        "a\tb\nc",
        "é" * 200,
        "k" * 300,
        "sha256:" + "0" * 64,
        "tool_call",
        "approval",
    ]
    if depth <= 0:
        return scalars
    inner = json_values(rng, depth - 1)
    return [
        *scalars,
        [rng.choice(inner) for _ in range(rng.randint(0, 3))],
        {str(rng.choice(inner)): rng.choice(inner) for _ in range(rng.randint(0, 3))},
    ]
