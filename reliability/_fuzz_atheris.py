"""Coverage-guided fuzzing of ``decode_record`` with atheris (libFuzzer), in its own process.

    python -m reliability._fuzz_atheris -runs=N -artifact_prefix=DIR/ CORPUS_DIR

libFuzzer owns the process (it exits when the runs are done), so the scenario starts this
module as a subprocess and reads ``Done N runs`` from its output. An exception other than
``RecordFormatError`` is a crash: libFuzzer prints it, saves the input and exits non-zero.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["zincir"]):
    from zincir import RecordFormatError, decode_record


def test_one_input(data: bytes) -> None:
    """One input: decoded, or refused with the codec's documented error."""
    try:
        decode_record(data)
    except RecordFormatError:
        pass


def main() -> None:
    """Hand the process to libFuzzer."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
