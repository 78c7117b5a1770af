"""``zincir ui``: check the address and the database, then serve the inspector with uvicorn."""

from __future__ import annotations

import click

from .._errors import InvalidInput, NotAZincirDatabase, SchemaTooNew, StoreError
from ..store import default_database_path
from ..store._sqlite import sqlite_path_from_url
from ._db import InspectorDatabase
from ._security import ADDRESS_ENV, UIAddress, address_from_env

__all__ = ["resolve_database_path", "serve", "ui_command"]


def resolve_database_path(option: str | None) -> str:
    """``--db``, else ``$ZINCIR_DATABASE_PATH``, else ``./zincir.db``, as a file path."""
    target = option or default_database_path()
    if target.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("the inspector reads SQLite databases only; pass --db PATH")
    return sqlite_path_from_url(target)


def serve(database: InspectorDatabase, address: UIAddress) -> None:
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
@click.option(
    "--db",
    "db_path",
    metavar="PATH",
    default=None,
    help="The zincir SQLite database (default: $ZINCIR_DATABASE_PATH, else ./zincir.db).",
)
def ui_command(db_path: str | None) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787.

    Set ZINCIR_UI_ADDRESS to another loopback address or port (127.0.0.2:9000, [::1]:8787,
    localhost:8800, :9000); other addresses are refused. The database is opened read-only:
    it is never created, migrated or written.
    """
    try:
        address = address_from_env()
        path = resolve_database_path(db_path)
    except InvalidInput as error:
        raise click.ClickException(error.detail) from None
    database = InspectorDatabase(path)
    try:
        database.check()
    except SchemaTooNew as error:
        click.echo(f"warning: {error.detail}; every page will say so", err=True)
    except (NotAZincirDatabase, StoreError) as error:
        raise click.ClickException(error.detail) from None
    serve(database, address)
