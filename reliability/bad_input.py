"""Bad input: fuzzed records, payload documents, invocations, command lines and database files.

Every entry point must answer malformed input with its documented zincir error, never
another exception type, a crash or a hang, and input refused on its way to a store must
leave the store as it was. The bulk of the record inputs are mutations of valid encoded
records (bit flips, truncations, splices, inserted tokens, structural edits) run straight
against ``decode_record``; hypothesis builds the structured inputs, and atheris, when it is
installed, fuzzes the decoder guided by coverage in its own process.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from reliability._fuzz_cli import fuzz_cli
from reliability._fuzz_codec import fuzz_codec, fuzz_invocations, fuzz_payloads, record_seeds
from reliability._fuzz_core import Tally
from reliability._fuzz_files import FileReport, make_zincir_database, probe_files
from reliability._fuzz_store import fuzz_store
from reliability._harness import Figure, Report, at_least, equal

ORDER = 9
TITLE = "Bad input"

REPO = Path(__file__).resolve().parents[1]
SEED = 20_240_917


def _counts(short: bool) -> dict[str, int]:
    """How many inputs each target gets."""
    if short:
        return {
            "codec": 4_000,
            "codec_structured": 100,
            "payloads": 1_500,
            "payloads_structured": 40,
            "invocations": 800,
            "invocations_structured": 60,
            "store": 120,
            "cli": 150,
            "cli_processes": 1,
            "file_rounds": 1,
            "atheris": 2_000,
        }
    return {
        "codec": 1_000_000,
        "codec_structured": 5_000,
        "payloads": 100_000,
        "payloads_structured": 1_000,
        "invocations": 50_000,
        "invocations_structured": 2_000,
        "store": 3_000,
        "cli": 5_000,
        "cli_processes": 20,
        "file_rounds": 3,
        "atheris": 300_000,
    }


def run_atheris(runs: int, folder: Path) -> tuple[Tally, str]:
    """``runs`` coverage-guided inputs through ``decode_record`` in an atheris process."""
    tally = Tally("decode_record (atheris)")
    if importlib.util.find_spec("atheris") is None:
        return tally, "atheris is not installed here (`pip install atheris`), so it did not run"
    corpus = folder / "corpus"
    corpus.mkdir()
    for index, seed in enumerate(record_seeds()):
        (corpus / f"seed-{index}").write_bytes(seed)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}"}
    command = [
        sys.executable,
        "-m",
        "reliability._fuzz_atheris",
        f"-runs={runs}",
        f"-seed={SEED}",
        "-max_len=4096",
        "-timeout=10",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={folder}/",
        str(corpus),
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=folder, timeout=1800
        )
    except subprocess.TimeoutExpired:
        tally.hangs += 1
        tally.untyped += 1
        return tally, "atheris did not finish within 30 min"
    found = re.search(r"Done (\d+) runs in (\d+) second", done.stderr)
    tally.tried = int(found.group(1)) if found else 0
    if done.returncode != 0:
        tally.untyped += 1
        tally.note(done.stderr[-1500:])
    else:
        tally.refused = tally.tried
    seconds = found.group(2) if found else "?"
    return (
        tally,
        f"atheris {_version('atheris')}: {tally.tried:,} coverage-guided runs in {seconds} s",
    )


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def run(short: bool) -> Report:
    """Fuzz every target at the short or the full counts and hold them to their targets."""
    counts = _counts(short)
    rng = random.Random(SEED)
    report = Report("bad_input", TITLE, short=short)
    with tempfile.TemporaryDirectory(prefix="zincir-bad-input-") as temp:
        folder = Path(temp)
        codec, round_trips = fuzz_codec(counts["codec"], rng, counts["codec_structured"])
        payloads = fuzz_payloads(counts["payloads"], rng, counts["payloads_structured"])
        invocations = fuzz_invocations(counts["invocations"], rng, counts["invocations_structured"])
        (folder / "store").mkdir()
        store = fuzz_store(folder / "store" / "zincir.db", counts["store"], SEED)
        (folder / "cli").mkdir()
        cli_db = folder / "cli" / "zincir.db"
        make_zincir_database(cli_db)
        cli = fuzz_cli(cli_db, folder / "cli", counts["cli"], counts["cli_processes"], rng)
        files = FileReport()
        for round_index in range(counts["file_rounds"]):
            found = probe_files(folder / f"files-{round_index}", random.Random(SEED + round_index))
            files.tally.merge(found.tally)
            files.files += found.files
            files.modified += found.modified
            files.accepted += [item for item in found.accepted if item not in files.accepted]
            files.modified_which += found.modified_which
            files.sidecars += found.sidecars
            files.errors_seen |= found.errors_seen
        (folder / "atheris").mkdir()
        fuzzed, atheris_note = run_atheris(counts["atheris"], folder / "atheris")
    targets = [codec, fuzzed, payloads, invocations, store.runtime_tally, store.context_tally, cli]
    targets.append(files.tally)
    report.figures = _figures(short, targets, round_trips, store.partial_writes, files)
    report.notes = _notes(targets, round_trips, files, store.evidence, atheris_note)
    return report


def _figures(
    short: bool, targets: list[Tally], round_trips: Tally, partial_writes: int, files: FileReport
) -> list[Figure]:
    codec, _, payloads, invocations, runtime, context, cli, file_tally = targets
    figures = [
        at_least("record codec inputs (decode_record)", codec.tried, 2_000 if short else 1_000_000),
        Figure(
            "record codec inputs (atheris, coverage-guided)",
            targets[1].tried,
            "where installed",
            True,
        ),
        at_least("payload document inputs", payloads.tried, 1_000 if short else 100_000),
        at_least("invocation inputs", invocations.tried, 500 if short else 50_000),
        at_least(
            "inputs through the store API", runtime.tried + context.tried, 100 if short else 3_000
        ),
        at_least("CLI command lines", cli.tried, 100 if short else 5_000),
        equal("untyped errors", sum(tally.untyped for tally in [*targets, round_trips]), 0),
        equal("hangs (an input over 2 s)", sum(tally.hangs for tally in targets), 0),
        equal("decoded records that do not encode back", round_trips.untyped, 0),
        equal("partial writes", partial_writes, 0),
        at_least("bad database files tried", files.files, 19),
        equal("bad files modified", files.modified, 0),
        Figure(
            "refusals that left -wal/-shm beside the file",
            len(files.sidecars),
            "reported",
            True,
        ),
    ]
    return figures


def _notes(
    targets: list[Tally],
    round_trips: Tally,
    files: FileReport,
    evidence: list[str],
    atheris_note: str,
) -> list[str]:
    notes = [
        "Per target, inputs tried / accepted / refused with the documented error: "
        + "; ".join(
            f"{tally.name} {tally.tried:,} / {tally.accepted:,} / {tally.refused:,}"
            for tally in targets
        ),
        f"Decoded records re-encoded and decoded again: {round_trips.tried:,}.",
        atheris_note,
        "Bad files: each opened by the read-only view, the inspector, `zincir runs list`, "
        "`zincir runs show` and `zincir.open_store`; errors seen: "
        + ", ".join(sorted(name for name in files.errors_seen if not name.startswith("_")))
        + " (the CLI: exit 1, one line).",
        "Accepted without error (documented, or damage the reads did not touch): "
        + "; ".join(files.accepted)
        + ". An empty or missing file is a new database for `open_store`; the inspector "
        "serves a newer schema as a 409 page.",
    ]
    if files.modified_which:
        notes.append(f"Bad files changed: {'; '.join(files.modified_which[:5])}.")
    if files.sidecars:
        notes.append(
            "Refused files keep their bytes, but a read-only refusal of a WAL-mode file leaves "
            "an empty -wal and a 32 KiB -shm beside it (SQLite's WAL index, made by the "
            "read-only connection; `open_store` leaves none): "
            + "; ".join(files.sidecars[:8])
            + ("; …" if len(files.sidecars) > 8 else "")
        )
    for tally in [*targets, round_trips]:
        notes += [f"Untyped error in {tally.name}: {sample}" for sample in tally.samples]
    notes += evidence
    return notes
