"""Owner ids: their format, and owner_gone's strict judgement of malformed ones."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from zincir.store import new_owner_id
from zincir.store._owner import _process, _this_process, owner_gone, owner_status, parse_owner
from zincir.store._records import new_owner_id as records_new_owner_id


def test_an_owner_id_names_host_pid_and_the_identity_that_proves_death() -> None:
    owner = new_owner_id()
    host, pid, rand, host_id, boot, start = owner.split(":")
    assert host == re.sub(r"[:\s]", "-", socket.gethostname()) and pid == str(os.getpid())
    assert re.fullmatch(r"[0-9a-f]{12}", rand) and re.fullmatch(r"[0-9a-f]{12}", host_id)
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot == boot_id.replace("-", "")[:16]
    assert int(start) == _process(os.getpid())[1]  # type: ignore[index]
    assert new_owner_id() != owner and records_new_owner_id is new_owner_id
    identity = parse_owner(owner)
    assert identity is not None and identity.pid == os.getpid() and identity.host == host
    assert owner_status(owner) == "alive" and not owner_gone(owner)


def test_a_forked_child_names_its_own_pid_and_start() -> None:
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads: the child
        child = os.fork()  # only writes to a pipe and exits
    if child == 0:  # pragma: no cover - the child
        os.write(write, new_owner_id().encode())
        os._exit(0)
    os.close(write)
    owner = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(child, 0)
    assert owner.split(":")[1] == str(child) and owner_gone(owner)


MALFORMED = [
    "",
    ":",
    "host",
    "host:123",
    "host:123:0123456789ab",  # the old format: no identity
    "host:0:0123456789ab:0123456789ab:0123456789abcdef:5",  # pid 0
    "host:-1:0123456789ab:0123456789ab:0123456789abcdef:5",
    "host:12345678901:0123456789ab:0123456789ab:0123456789abcdef:5",  # pid too long
    "host:123:0123456789AB:0123456789ab:0123456789abcdef:5",  # upper-case hex
    "host:123:0123456789ab:0123456789a:0123456789abcdef:5",  # short host id
    "host:123:0123456789ab:0123456789ab:0123456789abcde:5",  # short boot
    "host:123:0123456789ab:0123456789ab:0123456789abcdef:x",
    "host:123:0123456789ab:0123456789ab:0123456789abcdef:",
    "host:١٢٣:0123456789ab:0123456789ab:0123456789abcdef:5",  # non-ASCII digits
    "host:123:0123456789ab:0123456789ab:0123456789abcdef:5\n",
    "ho st:123:0123456789ab:0123456789ab:0123456789abcdef:5",
    ":123:0123456789ab:0123456789ab:0123456789abcdef:5",
    "a:b:c:d:e:f:g",
    "\x00" * 50,
]


@pytest.mark.parametrize("owner", MALFORMED)
def test_a_malformed_owner_id_is_never_gone(owner: str) -> None:
    here = _this_process()
    # the same string with this machine's identity substituted where it fits
    mine = owner.replace("0123456789ab:0123456789abcdef", f"{here.host_id}:{here.boot}")
    for text in (owner, mine):
        assert parse_owner(text) is None
        assert owner_status(text) == "unknown" and owner_gone(text) is False


@pytest.mark.parametrize("owner", [None, 5, b"host:1:x", ["a"], object()])
def test_a_non_string_owner_is_never_gone(owner: object) -> None:
    assert owner_gone(owner) is False


def mine(pid: int, start: int | str, boot: str | None = None, host_id: str | None = None) -> str:
    here = _this_process()
    return f"h:{pid}:0123456789ab:{host_id or here.host_id}:{boot or here.boot}:{start}"


def test_what_owner_gone_judges() -> None:
    here = _this_process()
    assert here.start is not None
    assert owner_status(mine(os.getpid(), here.start)) == "alive"
    assert owner_gone(mine(os.getpid(), here.start + 1))  # the pid now names another process
    assert owner_gone(mine(os.getpid(), here.start, boot="f" * 16))  # an earlier boot
    assert owner_gone(mine(2_000_000_000, 1))  # no such process (pids end at 2**22)
    assert owner_status(mine(os.getpid(), "-")) == "unknown"  # its start was not known
    assert owner_status(mine(os.getpid(), here.start, boot="-")) == "unknown"
    assert owner_status(mine(4_000_000_000, 1, host_id="f" * 12)) == "elsewhere"
    assert not owner_gone(mine(4_000_000_000, 1, host_id="f" * 12))


def test_another_users_live_process_is_not_gone() -> None:
    """pid 1 exists (init, another user's: kill(1, 0) is refused), so it is not gone."""
    init = _process(1)
    if init is None:  # hidden from this user: cannot be proven either way
        assert owner_status(mine(1, 1)) == "unknown"
    else:
        assert owner_status(mine(1, init[1])) == "alive"


def test_a_killed_process_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen(["sleep", "300"])
    try:
        for _ in range(100):
            found = _process(child.pid)
            if found is not None:
                break
            time.sleep(0.01)
        assert found is not None
        owner = mine(child.pid, found[1])
        assert owner_status(owner) == "alive"
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(500):
            if (_process(child.pid) or ("",))[0] == "Z":
                break
            time.sleep(0.01)
        assert owner_gone(owner)  # a zombie: dead, though its pid still exists
    finally:
        child.kill()
        child.wait()
    assert owner_gone(owner)  # reaped: no such process
