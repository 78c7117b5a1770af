"""``zincir ui``: check the address and the database, then serve the inspector with uvicorn."""

from __future__ import annotations

import click

from .._cli_options import database_option, key_file_option, read_only_database
from .._errors import InvalidInput, SchemaTooNew, ZincirError
from ._db import View
from ._security import ADDRESS_ENV, UIAddress, address_from_env

__all__ = ["serve", "ui_command"]


def serve(database: View, address: UIAddress) -> None:
    """Serve ``database`` on ``address`` until interrupted (blocking)."""
    import uvicorn

    from ._app import create_app

    app = create_app(database, address=address)
    config = uvicorn.Config(
        app,
        host=address.host,
        port=address.port,
        proxy_headers=False,
        server_header=False,
        ws="none",
        lifespan="off",
        log_level="info",
    )
    click.echo(
        f"zincir inspector: {address.url} (read-only view of {database.path}; "
        f"set {ADDRESS_ENV} for another loopback address)"
    )
    if _sealed(database):
        click.echo(
            "the database is encrypted and no key was given: payloads show as sealed "
            "(give --key-file to read them)",
            err=True,
        )
    uvicorn.Server(config).run()


def _sealed(database: View) -> bool:
    """Whether the view reads an encrypted database without its keys (False when it cannot
    be read now: the pages say why)."""
    try:
        with database.snapshot() as reader:
            return reader.sealed
    except ZincirError:
        return False


@click.command("ui")
@database_option
@key_file_option
def ui_command(database: str, key_file: str | None = None) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787.

    Set ZINCIR_UI_ADDRESS to another loopback address or port (127.0.0.2:9000, [::1]:8787,
    localhost:8800, :9000); other addresses are refused. The database is opened read-only:
    it is never created, migrated or written. --key-file PATH (or $ZINCIR_ENCRYPTION_KEYS)
    shows an encrypted database's payloads decrypted; without keys they show as sealed.
    """
    try:
        address = address_from_env()
        view = read_only_database(database, key_file)
    except InvalidInput as error:
        raise click.ClickException(error.detail) from None
    try:
        view.check()
    except SchemaTooNew as error:
        click.echo(f"warning: {error.detail}; every page will say so", err=True)
    except ZincirError as error:
        raise click.ClickException(error.detail) from None
    serve(view, address)
