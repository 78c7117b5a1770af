"""What only the file store promises: an owner-only folder, escaped file names, format
version 1 read and rewritten as 2, and saves that a SIGKILL never leaves torn."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.restart.restart_worker import CHECKPOINT, RUN, churn_payload
from zincir import (
    InvalidInput,
    InvalidPayload,
    RevisionConflict,
    StoreError,
    UnsupportedVersion,
)
from zincir.restart import FileRestartStore, RestartCheckpoint
from zincir.restart._file import _unescape, file_name

WORKER = REPO / "tests" / "restart" / "restart_worker.py"
FIXTURES = Path(__file__).parent / "fixtures"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- the folder -------------------------------------------------------------------------


async def test_a_missing_folder_is_created_owner_only_with_owner_only_files(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "a" / "b" / "checkpoints"
    old_umask = os.umask(0)  # the store sets its modes itself, whatever the umask
    try:
        store = FileRestartStore(folder)
        await store.save("run", "consumer", 1, {"offset": 1})
    finally:
        os.umask(old_umask)
    assert mode(folder) == 0o700
    names = os.listdir(folder)
    assert sorted(names) == [".lock", "run.consumer.ckpt"]
    assert all(mode(folder / name) == 0o600 for name in names)


async def test_an_existing_private_folder_is_used_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    store = FileRestartStore(str(folder))
    await store.save("run", "consumer", 1, None)
    assert mode(folder) == 0o755  # readable by others is the owner's choice; files are 0600
    assert mode(folder / "run.consumer.ckpt") == 0o600


@pytest.mark.parametrize("unsafe", [0o777, 0o770, 0o720, 0o702, 0o1777])
def test_a_folder_others_can_write_is_refused_untouched(tmp_path: Path, unsafe: int) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(unsafe)
    with pytest.raises(InvalidInput, match="group or others") as caught:
        FileRestartStore(folder)
    assert "chmod 700" in str(caught.value)
    assert os.listdir(folder) == []
    assert mode(folder) == unsafe


def test_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(InvalidInput, match="symbolic link"):
        FileRestartStore(link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InvalidInput, match="symbolic link"):
        FileRestartStore(dangling)
    assert os.listdir(real) == [] and not (tmp_path / "nowhere").exists()


def test_a_file_or_another_users_folder_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a folder")
    with pytest.raises(InvalidInput, match="not a folder"):
        FileRestartStore(plain)
    for bad in ("", "a\x00b", 42):
        with pytest.raises(InvalidInput):
            FileRestartStore(bad)  # type: ignore[arg-type]
    if os.geteuid() != 0:
        return  # only root can give a folder away
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(InvalidInput, match="belongs to user 65534"):
        FileRestartStore(theirs)


async def test_a_folder_made_unsafe_later_is_refused_at_the_next_call(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    store = FileRestartStore(folder)
    await store.save("run-7", "consumer", 1, "one")
    folder.chmod(0o777)
    with pytest.raises(InvalidInput) as caught:
        await store.save("run-7", "consumer", 2, "two")
    assert caught.value.run_id == "run-7"
    with pytest.raises(InvalidInput):
        await store.load("run-7", "consumer")
    folder.chmod(0o700)
    assert await store.load("run-7", "consumer") == RestartCheckpoint("run-7", "consumer", 1, "one")
    shutil.rmtree(folder)
    with pytest.raises(StoreError, match="gone"):
        await store.load("run-7", "consumer")


# -- file names ---------------------------------------------------------------------------


def test_file_names_are_plain_ascii_and_never_leave_the_folder() -> None:
    assert file_name("run-1", "consumer") == "run-1.consumer.ckpt"
    assert file_name("../..", "/") == "%2E%2E%2F%2E%2E.%2F.ckpt"
    assert file_name("A", "x") != file_name("a", "x")
    assert file_name("A", "x").lower() != file_name("a", "x").lower()  # case-insensitive disks
    assert file_name("\u00e9", "x") != file_name("e\u0301", "x")  # normalising disks
    assert file_name("a.b", "c") != file_name("a", "b.c")
    long = file_name("r" * 256, "é" * 128)
    assert long.startswith("=") and long.endswith(".ckpt") and len(long) == 70


ids = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)


@given(ids, ids, ids, ids)
def test_file_names_are_injective(run_a: str, id_a: str, run_b: str, id_b: str) -> None:
    name = file_name(run_a, id_a)
    assert name.isascii() and "/" not in name and name not in (".", "..")
    assert not name.startswith(".") and "\x00" not in name
    if (run_a, id_a) != (run_b, id_b):
        assert name.lower() != file_name(run_b, id_b).lower()
    if not name.startswith("="):
        run_part, id_part, suffix = name.split(".")
        assert (_unescape(run_part), _unescape(id_part), suffix) == (run_a, id_a, "ckpt")


# -- format versions ------------------------------------------------------------------------


def _legacy(tmp_path: Path) -> tuple[FileRestartStore, Path]:
    store = FileRestartStore(tmp_path / "checkpoints")
    target = tmp_path / "checkpoints" / "legacy-run.consumer.ckpt"
    shutil.copyfile(FIXTURES / "v1" / "legacy-run.consumer.ckpt", target)
    return store, target


LEGACY = RestartCheckpoint(
    "legacy-run", "consumer", 7, {"stream": "orders", "offset": 4096, "seen": ["a1", "a2"]}
)


async def test_a_version_1_file_is_read(tmp_path: Path) -> None:
    store, target = _legacy(tmp_path)
    assert await store.load("legacy-run", "consumer") == LEGACY
    assert await store.list("legacy-run") == [LEGACY]
    with pytest.raises(RevisionConflict):
        await store.save("legacy-run", "consumer", 6, {})
    with pytest.raises(RevisionConflict):
        await store.save("legacy-run", "consumer", 7, {})
    assert json.loads(target.read_text())["version"] == 1


async def test_an_identical_save_rewrites_a_version_1_file_as_version_2(tmp_path: Path) -> None:
    store, target = _legacy(tmp_path)
    assert await store.save("legacy-run", "consumer", 7, LEGACY.payload) == LEGACY
    document = json.loads(target.read_text())
    assert document["version"] == 2
    assert (document["run_id"], document["checkpoint_id"]) == ("legacy-run", "consumer")
    assert (document["revision"], document["payload"]) == (7, LEGACY.payload)
    assert document["updated_at"].endswith("Z")
    assert mode(target) == 0o600
    assert await store.load("legacy-run", "consumer") == LEGACY


async def test_the_next_revision_of_a_version_1_file_is_written_as_version_2(
    tmp_path: Path,
) -> None:
    store, target = _legacy(tmp_path)
    await store.save("legacy-run", "consumer", 8, {"offset": 5000})
    document = json.loads(target.read_text())
    assert (document["version"], document["revision"]) == (2, 8)
    assert await store.load("legacy-run", "consumer") == RestartCheckpoint(
        "legacy-run", "consumer", 8, {"offset": 5000}
    )


@pytest.mark.parametrize(
    ("content", "error", "words"),
    [
        ('{"version": 3, "revision": 1, "payload": null}', UnsupportedVersion, "version 3"),
        ('{"version": true, "revision": 1, "payload": null}', UnsupportedVersion, "version"),
        ('{"revision": 1, "payload": null}', UnsupportedVersion, "version None"),
        ('{"version": 1, "revision": 1, "payload": 1', InvalidPayload, "not a JSON"),
        ('{"version": 1, "revision": -1, "payload": 1}', InvalidPayload, "revision"),
        ('{"version": 1, "revision": 1, "payload": 1, "x": 2}', InvalidPayload, "fields"),
        ("[1]", InvalidPayload, "object"),
        (
            '{"version": 2, "run_id": "other", "checkpoint_id": "consumer", "revision": 1, '
            '"updated_at": "2030-01-01T00:00:00.000000Z", "payload": 1}',
            InvalidPayload,
            "not this file's",
        ),
    ],
)
async def test_a_damaged_or_unknown_file_is_refused_by_name(
    tmp_path: Path, content: str, error: type[Exception], words: str
) -> None:
    store = FileRestartStore(tmp_path / "checkpoints")
    target = tmp_path / "checkpoints" / "run-1.consumer.ckpt"
    target.write_text(content)
    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: store.load("run-1", "consumer"),
        lambda: store.save("run-1", "consumer", 9, 0),
    ]
    for attempt in attempts:
        with pytest.raises(error, match=words) as caught:
            await attempt()
        assert caught.value.run_id == "run-1"  # type: ignore[attr-defined]
        assert str(target) in str(caught.value)
    assert target.read_text() == content


async def test_a_symlink_in_place_of_a_checkpoint_is_not_followed(tmp_path: Path) -> None:
    store = FileRestartStore(tmp_path / "checkpoints")
    secret = tmp_path / "secret.json"
    secret.write_text('{"version": 1, "revision": 1, "payload": "secret"}')
    (tmp_path / "checkpoints" / "run-1.consumer.ckpt").symlink_to(secret)
    with pytest.raises(StoreError, match="symbolic link"):
        await store.load("run-1", "consumer")
    with pytest.raises(StoreError, match="symbolic link"):
        await store.save("run-1", "consumer", 2, "overwrite")
    assert "secret" in secret.read_text()


async def test_a_file_past_the_bound_is_refused_when_read(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    await FileRestartStore(folder).save("run-1", "big", 1, "x" * 20_000)
    small = FileRestartStore(folder, max_payload_bytes=1000)
    with pytest.raises(InvalidInput, match="max_payload_bytes"):
        await small.load("run-1", "big")


# -- SIGKILL during saves ---------------------------------------------------------------------

SIZE = 600_000


def _churn(folder: Path, *stop: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), "churn", str(folder), str(SIZE), *stop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def _kill(process: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the worker and return the lines it printed."""
    process.send_signal(signal.SIGKILL)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    return out.split("\n")


def _acknowledged(lines: list[str]) -> int:
    saved = [int(line.split()[1]) for line in lines if line.startswith("saved ")]
    return saved[-1] if saved else 0


def _temp_files(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(".tmp")]


async def _assert_whole(store: FileRestartStore, revisions: set[int]) -> int:
    """The checkpoint is one of ``revisions``, complete; the only one listed."""
    loaded = await store.load(RUN, CHECKPOINT)
    assert loaded is not None
    assert loaded.revision in revisions
    assert loaded.payload == churn_payload(loaded.revision, SIZE)
    assert await store.list(RUN) == [loaded]
    return loaded.revision


@pytest.mark.crash
@pytest.mark.parametrize(("point", "survivor"), [("write", 2), ("replace", 2), ("renamed", 3)])
async def test_a_save_killed_at_a_named_point_leaves_the_old_or_the_new_file(
    tmp_path: Path, point: str, survivor: int
) -> None:
    folder = tmp_path / "checkpoints"
    reader = FileRestartStore(folder)
    process = _churn(folder, point, "3")
    assert process.stdout is not None
    line = ""
    while line != point:
        line = process.stdout.readline().strip()
        assert line, process.stderr.read() if process.stderr else ""
    lines = _kill(process)
    assert await _assert_whole(reader, {survivor}) == survivor
    leftovers = _temp_files(folder)
    assert leftovers == ([] if point == "renamed" else [f".{file_name(RUN, CHECKPOINT)}.tmp"])
    assert "saved 3" not in lines
    FileRestartStore(folder)  # opening the folder removes what killed saves left
    assert _temp_files(folder) == []
    again = _churn(folder)
    assert again.stdout is not None
    line = ""
    while not line.startswith("saved"):
        line = again.stdout.readline()
        assert line, again.stderr.read() if again.stderr else ""
    _kill(again)
    assert await _assert_whole(reader, set(range(survivor + 1, survivor + 1000))) > survivor


@pytest.mark.crash
async def test_saves_killed_at_random_moments_never_leave_a_torn_file(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    reader = FileRestartStore(folder)
    chance = random.Random(20300101)
    await reader.save(RUN, CHECKPOINT, 1, churn_payload(1, SIZE))
    acknowledged = 1
    for _ in range(6):
        process = _churn(folder)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", process.stderr
        await_time = chance.uniform(0.0, 0.25)
        try:
            process.wait(timeout=await_time)
        except subprocess.TimeoutExpired:
            pass
        lines = _kill(process)
        acknowledged = max(acknowledged, _acknowledged(lines))
        acknowledged = await _assert_whole(reader, {acknowledged, acknowledged + 1})
        FileRestartStore(folder)  # removes a killed save's temp file
        assert _temp_files(folder) == []
    assert acknowledged > 1  # the workers did save between the kills
