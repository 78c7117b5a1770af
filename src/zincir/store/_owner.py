"""Lease owner ids, and whether the process an owner id names is provably dead.

An owner id reads ``host:pid:random:hostid:boot:start``: the hostname and process id for
people, a random part (one process holds many leases), and the identity that lets another
process on the same machine tell that the owner died: ``hostid`` (a short hash of the
machine id, the hostname and the process id namespace), ``boot`` (the kernel's boot id)
and ``start`` (the process's start time in clock ticks since boot, from ``/proc``). Where
``/proc`` is missing (macOS) ``boot`` and ``start`` are ``-`` and nobody is judged dead.

An owner is gone only when this machine (same ``hostid``) proves it: the machine booted
since, no process has its pid, its pid is a zombie, or its pid now belongs to a process
started at another time (pid reused). Anything else, an owner on another machine, an old
``host:pid:random`` id, a malformed id or one this process cannot check, is not gone: its
lease is waited out.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "OwnerIdentity",
    "OwnerStatus",
    "gone_owners",
    "new_owner_id",
    "owner_gone",
    "owner_status",
    "parse_owner",
    "this_machine_like",
]

OwnerStatus = Literal["gone", "alive", "elsewhere", "unknown"]
"""What this machine can tell of an owner: ``gone`` (provably dead), ``alive`` (a live
process here), ``elsewhere`` (another machine) or ``unknown`` (cannot be judged here)."""

_UNKNOWN: Final = "-"
_OWNER: Final = re.compile(
    r"(?P<host>[^:\s]{1,255}):(?P<pid>[1-9][0-9]{0,9}):(?P<rand>[0-9a-f]{12}):"
    r"(?P<hostid>[0-9a-f]{12}):(?P<boot>[0-9a-f]{16}|-):(?P<start>[0-9]{1,20}|-)"
)
_MACHINE_ID_FILES: Final = ("/etc/machine-id", "/var/lib/dbus/machine-id")
_BOOT_ID_FILE: Final = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, slots=True)
class OwnerIdentity:
    """The parts of an owner id (``boot`` and ``start`` None where they were unknown)."""

    host: str
    pid: int
    host_id: str
    boot: str | None
    start: int | None


@dataclass(frozen=True, slots=True)
class _Here:
    """This process's identity, read once per process id (a forked child reads its own)."""

    pid: int
    host: str
    host_id: str
    boot: str | None
    start: int | None


_here: _Here | None = None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read(4096).strip()
    except (OSError, ValueError):
        return None


def _process(pid: int) -> tuple[str, int] | None:
    """(state, start time in ticks since boot) of process ``pid`` from /proc; None when
    unreadable (no /proc, no such process, hidden) or malformed."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rpartition(")")[2].split()  # comm may hold spaces and parentheses
    if len(fields) < 20 or not (fields[19].isascii() and fields[19].isdecimal()):
        return None
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime)


def _host_name() -> str:
    name = re.sub(r"[:\s]", "-", socket.gethostname())[:255]
    return name or "localhost"


def _this_process() -> _Here:
    global _here
    pid = os.getpid()
    if _here is None or _here.pid != pid:
        host = _host_name()
        machine = next(filter(None, map(_read, _MACHINE_ID_FILES)), "")
        namespace = ""
        try:
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            pass
        digest = hashlib.sha256(f"{machine}\0{host}\0{namespace}".encode()).hexdigest()
        boot = _read(_BOOT_ID_FILE)
        boot_hex = None if boot is None else boot.replace("-", "").lower()[:16]
        if boot_hex is not None and not re.fullmatch(r"[0-9a-f]{16}", boot_hex):
            boot_hex = None
        process = _process(pid)
        _here = _Here(pid, host, digest[:12], boot_hex, None if process is None else process[1])
    return _here


def new_owner_id() -> str:
    """A name unique to one lease or claim holder: host, process id, a random part, and
    the identity (host id, boot, process start) that tells when this process has died."""
    here = _this_process()
    boot = _UNKNOWN if here.boot is None else here.boot
    start = _UNKNOWN if here.start is None else str(here.start)
    return f"{here.host}:{here.pid}:{uuid.uuid4().hex[:12]}:{here.host_id}:{boot}:{start}"


def parse_owner(owner: object) -> OwnerIdentity | None:
    """The identity an owner id names; None for an old-format, malformed or foreign id."""
    if not isinstance(owner, str):
        return None
    match = _OWNER.fullmatch(owner)
    if match is None:
        return None
    boot, start = match["boot"], match["start"]
    return OwnerIdentity(
        host=match["host"],
        pid=int(match["pid"]),
        host_id=match["hostid"],
        boot=None if boot == _UNKNOWN else boot,
        start=None if start == _UNKNOWN else int(start),
    )


def _pid_exists(pid: int) -> bool | None:
    """Whether a process ``pid`` exists (another user's too); None when it cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError, ValueError):
        return None
    return True


def owner_status(owner: object) -> OwnerStatus:
    """What this machine can tell of the process that owner id ``owner`` names; never
    raises."""
    try:
        return _judge(owner)
    except Exception:  # a judgement that fails proves nothing
        return "unknown"


def _judge(owner: object) -> OwnerStatus:
    identity = parse_owner(owner)
    if identity is None:
        return "unknown"
    here = _this_process()
    if identity.host_id != here.host_id:
        return "elsewhere"
    if here.boot is None or identity.boot is None or here.start is None:
        return "unknown"
    if identity.boot != here.boot:
        return "gone"  # written before this machine last booted
    if identity.start is None:
        return "unknown"
    exists = _pid_exists(identity.pid)
    if exists is None:
        return "unknown"
    if not exists:
        return "gone"
    process = _process(identity.pid)
    if process is None:
        return "unknown"  # exited just now, or hidden from this user: not proven
    state, start = process
    if state in ("Z", "X") or start != identity.start:
        return "gone"  # a zombie, or the pid now names a newer process
    return "alive"


def owner_gone(owner: object) -> bool:
    """True only when the process owner id ``owner`` names provably no longer runs (see
    the module docstring); never raises."""
    return owner_status(owner) == "gone"


def this_machine_like() -> str:
    """A LIKE pattern matching the owner ids of this machine (a cheap pre-filter: the
    owner ids it matches are then judged one by one)."""
    return f"%:{_this_process().host_id}:%"


def gone_owners(owners: Iterable[object]) -> list[str]:
    """The owner ids among ``owners`` whose processes provably died (see owner_gone)."""
    return sorted({owner for owner in owners if isinstance(owner, str) and owner_gone(owner)})
