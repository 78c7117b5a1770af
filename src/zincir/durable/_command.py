"""CommandHandler: a handler that runs a program per invocation, so workers can be any language.

The protocol: stdin receives one JSON object, the invocation itself
(``{"run_id":…,"step_id":…,"sequence":…,"kind":…,"handler_id":…,"input_json":…}``), and is
closed. stdout holds one JSON document: an object with ``version`` and ``invocation`` keys is a
record (it must be this invocation's, else ``DigestMismatch``/``InputDrift`` is raised and
nothing is stored); anything else is the output document of a success.

Failures, each with the tail of stderr in its message:

    CommandExited          non-zero exit or killed by a signal    retryable (may be transient)
    CommandTimedOut        still running at the timeout; killed   retryable
    CommandOutputTooLarge  stdout above max_output_bytes; killed  not retryable
    CommandOutputInvalid   stdout not one JSON document / record  not retryable
    CommandStartFailed     the program could not be started       not retryable

A program that wants a permanent failure prints a record holding it and exits 0. stdout is
read to its end: a background child that keeps it open counts against the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from .._errors import DigestMismatch, InvalidInput, RecordFormatError
from .._json import StrictJsonError, dumps, loads_strict
from .._validate import check_count, check_positive_duration
from ..contract import Failure, Invocation, Outcome, Success, decode_record
from ._registry import check_record

__all__ = ["DEFAULT_COMMAND_TIMEOUT", "DEFAULT_MAX_OUTPUT_BYTES", "CommandHandler"]

DEFAULT_COMMAND_TIMEOUT: Final = timedelta(seconds=60)
DEFAULT_MAX_OUTPUT_BYTES: Final = 8 * 1024 * 1024
STDERR_TAIL_CHARS: Final = 2000
_STDERR_KEEP: Final = 64 * 1024
_CHUNK: Final = 64 * 1024
_JSON_SPACE: Final = " \t\r\n"
_REAP_SECONDS: Final = 5.0


class _TooLarge(Exception):
    """stdout grew past the bound."""


class CommandHandler:
    """Runs ``argv`` once per invocation with asyncio subprocesses (its own process group).

    ``env`` replaces the child's environment when given (as in ``subprocess``); ``cwd`` is
    its working directory. Register it like any handler:
    ``registry.register(kind, handler_id, CommandHandler([...]))``.
    """

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        timeout: timedelta | float = DEFAULT_COMMAND_TIMEOUT,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(argv, str | bytes) or not isinstance(argv, Sequence) or not argv:
            raise InvalidInput("argv must be a non-empty list of strings, e.g. ['python', 'w.py']")
        if not all(isinstance(arg, str | os.PathLike) for arg in argv):
            raise InvalidInput("every argv item must be a str or path")
        self.argv: tuple[str, ...] = tuple(os.fspath(arg) for arg in argv)
        self.timeout = check_positive_duration(timeout, "timeout")
        self.max_output_bytes = check_count(max_output_bytes, "max_output_bytes")
        if env is not None and (
            not isinstance(env, Mapping)
            or not all(
                isinstance(name, str) and isinstance(value, str) for name, value in env.items()
            )
        ):
            raise InvalidInput("env must be a mapping of str names to str values")
        self.env = dict(env) if env is not None else None
        self.cwd = os.fspath(cwd) if cwd is not None else None

    def __repr__(self) -> str:
        return f"CommandHandler({list(self.argv)!r}, timeout={self.timeout!r})"

    async def __call__(self, invocation: Invocation, request: Any = None) -> Outcome:
        """Run the program for ``invocation``; returns its outcome (a record's, if it printed one).

        Raises ``DigestMismatch`` or ``InputDrift`` when the program prints a record for
        another invocation: such an answer is refused, never stored.
        """
        stdin = dumps(invocation.to_dict(), what="invocation").encode("utf-8")
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except (OSError, ValueError) as error:
            return Failure("CommandStartFailed", False, f"cannot start {self.argv[0]}: {error}")
        stderr = bytearray()
        try:
            try:
                stdout, code = await asyncio.wait_for(
                    self._communicate(process, stdin, stderr), self.timeout.total_seconds()
                )
            except TimeoutError:
                await _kill_and_reap(process)
                return self._failure(
                    "CommandTimedOut",
                    True,
                    f"was still running after {self.timeout.total_seconds():g}s and was killed",
                    stderr,
                )
            except _TooLarge:
                await _kill_and_reap(process)
                return self._failure(
                    "CommandOutputTooLarge",
                    False,
                    f"wrote more than {self.max_output_bytes} bytes to stdout and was killed",
                    stderr,
                )
        except BaseException:
            _kill_group(process)  # cancelled: never leave the program running
            raise
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return self._failure("CommandExited", True, how, stderr)
        return self._parse(invocation, stdout, stderr)

    async def _communicate(
        self, process: asyncio.subprocess.Process, data: bytes, stderr: bytearray
    ) -> tuple[bytes, int]:
        """Feed stdin, collect stdout (bounded) and stderr's tail, and wait for the exit."""
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        reader = asyncio.ensure_future(self._read_stdout(process.stdout))
        tasks: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(_feed(process.stdin, data)),
            reader,
            asyncio.ensure_future(_read_tail(process.stderr, stderr)),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        code = await process.wait()
        return reader.result(), code

    async def _read_stdout(self, stream: asyncio.StreamReader) -> bytes:
        buffer = bytearray()
        while chunk := await stream.read(_CHUNK):
            buffer += chunk
            if len(buffer) > self.max_output_bytes:
                raise _TooLarge
        return bytes(buffer)

    def _parse(self, invocation: Invocation, stdout: bytes, stderr: bytearray) -> Outcome:
        """stdout as a record (checked against the request) or as the output document."""
        try:
            text = stdout.decode("utf-8").strip(_JSON_SPACE)
            document = loads_strict(text)
        except (UnicodeDecodeError, StrictJsonError) as error:
            return self._failure(
                "CommandOutputInvalid",
                False,
                f"did not write exactly one JSON document to stdout ({error})",
                stderr,
            )
        if isinstance(document, dict) and "version" in document and "invocation" in document:
            try:
                record = decode_record(text)
            except DigestMismatch:
                raise
            except RecordFormatError as error:
                return self._failure(
                    "CommandOutputInvalid",
                    False,
                    f"wrote an invalid record: {error.detail}",
                    stderr,
                )
            check_record(invocation, record)
            return record.outcome
        return Success(text)

    def _failure(self, error: str, retryable: bool, what: str, stderr: bytearray) -> Failure:
        tail = stderr.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:].strip()
        message = f"{self.argv[0]} {what}" + (f"; stderr tail: {tail}" if tail else "")
        return Failure(error, retryable, message)


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    """Write the invocation and close stdin; a program that exits without reading is fine."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.close()
        await stream.wait_closed()


async def _read_tail(stream: asyncio.StreamReader, tail: bytearray) -> None:
    """Keep the last bytes of stderr only."""
    while chunk := await stream.read(_CHUNK):
        tail += chunk
        if len(tail) > _STDERR_KEEP:
            del tail[: len(tail) - _STDERR_KEEP]


async def _kill_and_reap(process: asyncio.subprocess.Process) -> None:
    """Kill the group, then wait (bounded) for the exit; an escaped child may hold the pipes."""
    _kill_group(process)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), _REAP_SECONDS)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the program and everything it started in its process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
