"""``zincir keys new|add|list`` (key files) and ``zincir reencrypt`` (reseal a database's
payloads with one key, or seal a plain database). Keys are never printed, only their ids
(``keys new`` without ``--out`` prints the new key file itself)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import click

from ._cli_options import database_option
from ._encryption import Encryption
from ._errors import InvalidInput
from .store._reencrypt import DEFAULT_BATCH, MAX_BATCH, ReencryptedTable, reencrypt

__all__ = ["keys", "reencrypt_command"]

_FILE_MODE = 0o600
_PROGRESS_EVERY = 1.0  # seconds between progress lines


def _write_private(path: Path, text: str, *, replace: bool) -> None:
    """Write ``text`` to ``path`` readable by its owner alone (mode 0600): a new file, or
    (``replace``) the old one replaced at once, so a crash leaves one or the other."""
    if not replace:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
        except FileExistsError:
            raise InvalidInput(
                f"{path} exists; give another --out (a key file is never overwritten)"
            ) from None
        except OSError as error:
            raise InvalidInput(f"cannot write the key file {str(path)!r}: {error}") from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        return
    folder = path.resolve().parent
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@click.group("keys")
def keys() -> None:
    """Make and extend key files for encryption at rest (open_store(encryption=...),
    --key-file). A key file is JSON: {"active": ID, "keys": {ID: base64 key}}."""


@keys.command("new")
@click.option("--id", "key_id", required=True, help="The new key's id (e.g. 2026-12).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the key file here (mode 0600; never overwritten). Default: print it.",
)
def keys_new(key_id: str, out: Path | None) -> None:
    """A new key file holding one new random AES-256 key, active."""
    encryption = Encryption({key_id: Encryption.generate_key()}, key_id)
    if out is None:
        click.echo(encryption.to_json(), nl=False)
        return
    _write_private(out, encryption.to_json(), replace=False)
    click.echo(f"wrote {out}: key {key_id!r} (active), mode 0600")


@keys.command("add")
@click.option(
    "--key-file",
    "key_file",
    required=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The key file to extend.",
)
@click.option("--id", "key_id", required=True, help="The new key's id.")
@click.option("--activate", is_flag=True, help="Make the new key the one that seals.")
def keys_add(key_file: Path, key_id: str, activate: bool) -> None:
    """Add a new random key to a key file (rotation: add, --activate, restart the
    processes with it, then `zincir reencrypt --to ID`)."""
    encryption = Encryption.from_file(key_file)
    if encryption.key(key_id) is not None:
        raise InvalidInput(f"{key_file} already holds a key {key_id!r}; choose another --id")
    keys = {k: v for k in encryption.key_ids if (v := encryption.key(k)) is not None}
    keys[key_id] = Encryption.generate_key()
    added = Encryption(keys, key_id if activate else encryption.active)
    _write_private(key_file, added.to_json(), replace=True)
    click.echo(f"added key {key_id!r} to {key_file}; active: {added.active!r}")


@keys.command("list")
@click.option(
    "--key-file",
    "key_file",
    required=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The key file.",
)
def keys_list(key_file: Path) -> None:
    """The ids of a key file's keys (never the keys), the active one marked."""
    encryption = Encryption.from_file(key_file)
    for key_id in encryption.key_ids:
        click.echo(f"{key_id}{'  (active)' if key_id == encryption.active else ''}")


class _Progress:
    """Prints a table's counts at most once a second while it is walked."""

    def __init__(self) -> None:
        self.shown = time.monotonic()

    def __call__(self, table: ReencryptedTable) -> None:
        now = time.monotonic()
        if now - self.shown >= _PROGRESS_EVERY:
            self.shown = now
            click.echo(f"  {table.table}: {table.scanned} rows read, {table.resealed} resealed")


@click.command("reencrypt")
@database_option
@click.option(
    "--key-file",
    "key_file",
    required=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The key file: every key that sealed a value in the database, and --to.",
)
@click.option(
    "--to", "to", required=True, metavar="KEYID", help="The key to seal every value with."
)
@click.option(
    "--batch",
    type=click.IntRange(1, MAX_BATCH),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Rows resealed in one transaction.",
)
@click.option(
    "--vacuum",
    is_flag=True,
    help="Then rewrite the database's files so no free page keeps an old value (SQLite "
    "VACUUM, PostgreSQL VACUUM FULL of the sealed tables; writers wait meanwhile).",
)
def reencrypt_command(database: str, key_file: Path, to: str, batch: int, vacuum: bool) -> None:
    """Reseal every stored payload with key KEYID, in batches, while runs go on; a plain
    database is sealed (first stop every process writing to it without the keys).
    Killed, run it again: it goes on where the values are not yet under KEYID."""
    encryption = Encryption.from_file(key_file, active=to)
    click.echo(
        f"resealing {database} with key {to!r} (keys given: {', '.join(encryption.key_ids)})"
    )
    report = asyncio.run(
        reencrypt(database, encryption, to=to, batch=batch, progress=_Progress(), vacuum=vacuum)
    )
    for table in report.tables:
        if not table.scanned:
            continue
        line = f"{table.table}: {table.resealed} of {table.scanned} rows resealed"
        if table.left:
            line += f", {table.left} rewritten meanwhile under another key"
        click.echo(line)
    click.echo(f"done: {report.resealed} rows resealed with key {to!r}")
    if report.sealed:
        click.echo("the database was plain and is sealed now: open it with the key file")
    if vacuum:
        click.echo("the database's files are rewritten: no free page keeps an old value")
    if report.left:
        raise click.ClickException(
            f"{report.left} rows were rewritten meanwhile under another key: make every "
            f"process seal with {to!r} (the active key), then run this again"
        )
