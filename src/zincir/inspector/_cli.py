"""``zincir ui``: check the address and the database, then serve the inspector with uvicorn."""

from __future__ import annotations

import click

from .._cli_options import database_option, read_only_database
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
    uvicorn.Server(config).run()


@click.command("ui")
@database_option
def ui_command(database: str) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787.

    Set ZINCIR_UI_ADDRESS to another loopback address or port (127.0.0.2:9000, [::1]:8787,
    localhost:8800, :9000); other addresses are refused. The database is opened read-only:
    it is never created, migrated or written.
    """
    try:
        address = address_from_env()
        view = read_only_database(database)
    except InvalidInput as error:
        raise click.ClickException(error.detail) from None
    try:
        view.check()
    except SchemaTooNew as error:
        click.echo(f"warning: {error.detail}; every page will say so", err=True)
    except ZincirError as error:
        raise click.ClickException(error.detail) from None
    serve(view, address)
