"""``zincir temporal-worker module:registry``: serve a HandlerRegistry on a Temporal task queue."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import click
from temporalio.client import Client
from temporalio.service import RPCError, TLSConfig

from .._cli_options import DatabaseLocation, Seconds
from .._encryption import Encryption, resolve_encryption
from .._errors import InvalidInput
from .._target import import_target
from ..durable._registry import HandlerRegistry
from ..store import open_store
from ._worker import Worker

__all__ = ["exit_now", "load_registry", "temporal_worker_command"]

MAX_ACTIVITIES = 2**31 - 1  # a slot count the Temporal SDK can hold (not an int overflow)


def load_registry(target: str) -> HandlerRegistry:
    """Import ``module:attribute``: a HandlerRegistry, or a callable that returns one."""
    value = import_target(target, example="myapp.workers:registry")
    if not isinstance(value, HandlerRegistry) and callable(value) and _takes_no_arguments(value):
        value = value()
    if not isinstance(value, HandlerRegistry):
        raise click.BadParameter(
            f"{target} is a {type(value).__name__}, not a zincir HandlerRegistry "
            "(or a callable returning one)",
            param_hint="TARGET",
        )
    return value


def _takes_no_arguments(function: Callable[..., object]) -> bool:
    try:
        inspect.signature(function).bind()
    except (TypeError, ValueError):
        return False
    return True


def _tls(
    tls: bool, cert: Path | None, key: Path | None, ca: Path | None, api_key: str | None
) -> TLSConfig | bool:
    if cert is not None or key is not None or ca is not None:
        if (cert is None) != (key is None):
            raise click.UsageError("--tls-cert and --tls-key go together")
        return TLSConfig(
            server_root_ca_cert=ca.read_bytes() if ca else None,
            client_cert=cert.read_bytes() if cert else None,
            client_private_key=key.read_bytes() if key else None,
        )
    return tls or bool(api_key)


async def _serve(
    registry: HandlerRegistry,
    *,
    address: str,
    namespace: str,
    task_queue: str,
    tls: TLSConfig | bool,
    api_key: str | None,
    max_concurrent_activities: int | None,
    shutdown_grace: float,
    content_store: str | None = None,
    encryption: Encryption | None = None,
) -> None:
    try:
        client = await Client.connect(address, namespace=namespace, tls=tls, api_key=api_key)
    except (RPCError, RuntimeError) as error:
        raise click.ClickException(f"cannot connect to Temporal at {address}: {error}") from None
    options: dict[str, Any] = {"graceful_shutdown_timeout": timedelta(seconds=shutdown_grace)}
    if max_concurrent_activities is not None:
        options["max_concurrent_activities"] = max_concurrent_activities
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    store = None if content_store is None else open_store(content_store, encryption=encryption)
    sealed = "" if encryption is None else f", payloads sealed with key {encryption.active!r}"
    try:
        async with Worker(
            client,
            registry,
            task_queue,
            content_store=store,
            encryption=encryption,
            **options,
        ):
            click.echo(
                f"zincir temporal-worker: serving {len(registry)} handler(s) on task queue "
                f"{task_queue!r} at {address} (namespace {namespace}{sealed}); Ctrl-C stops",
                err=True,
            )
            await stop.wait()
            click.echo(
                f"zincir temporal-worker: stopping; running handlers have {shutdown_grace:g} s",
                err=True,
            )
    finally:
        if store is not None:
            await store.close()


@click.command("temporal-worker")
@click.argument("target", metavar="MODULE:REGISTRY")
@click.option(
    "--address",
    envvar="ZINCIR_TEMPORAL_ADDRESS",
    default="127.0.0.1:7233",
    show_default=True,
    help="Temporal frontend host:port ($ZINCIR_TEMPORAL_ADDRESS).",
)
@click.option(
    "--namespace",
    envvar="ZINCIR_TEMPORAL_NAMESPACE",
    default="default",
    show_default=True,
    help="Temporal namespace ($ZINCIR_TEMPORAL_NAMESPACE).",
)
@click.option(
    "--task-queue",
    envvar="ZINCIR_TEMPORAL_TASK_QUEUE",
    required=True,
    help="Task queue the TemporalRuntime starts workflows on.",
)
@click.option("--tls/--no-tls", default=False, help="Connect with TLS (implied by the others).")
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Client certificate (PEM) for mTLS.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Client private key (PEM) for mTLS.",
)
@click.option(
    "--tls-ca",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Server root CA (PEM).",
)
@click.option(
    "--api-key",
    envvar="TEMPORAL_API_KEY",
    show_envvar=True,
    default=None,
    help="API key ($TEMPORAL_API_KEY; prefer the variable over the flag).",
)
@click.option(
    "--max-concurrent-activities",
    type=click.IntRange(1, MAX_ACTIVITIES),
    default=None,
    help="Handlers running at once in this process.",
)
@click.option(
    "--shutdown-grace",
    type=Seconds(0),
    default=30.0,
    show_default=True,
    help="Seconds running handlers may finish in after SIGINT/SIGTERM.",
)
@click.option(
    "--content-store",
    type=DatabaseLocation(),
    metavar="PATH",
    default=None,
    help="The zincir database the TemporalRuntime keeps large inputs in (its "
    "content_store=): a SQLite file or postgresql://URL. Inputs and records over 64 KiB "
    "then travel through Temporal as references to it.",
)
@click.option(
    "--key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Keys (JSON) sealing every payload this worker writes to Temporal and opening the "
    "sealed ones, and the --content-store's; default $ZINCIR_ENCRYPTION_KEYS when set. The "
    "TemporalRuntime needs the same keys.",
)
def temporal_worker_command(
    target: str,
    address: str,
    namespace: str,
    task_queue: str,
    tls: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    api_key: str | None,
    max_concurrent_activities: int | None,
    shutdown_grace: float,
    content_store: str | None,
    key_file: Path | None,
) -> None:
    """Run zincir operations from Temporal with the handlers of MODULE:REGISTRY.

    Serves workflow zincir.operation.v1 and activity zincir.execute.v1 on --task-queue until
    SIGINT or SIGTERM; credentials stay in this connection, never in invocation payloads.
    """
    registry = load_registry(target)
    try:
        encryption = (
            Encryption.from_file(key_file) if key_file is not None else resolve_encryption(None)
        )
    except InvalidInput as error:
        hint = "--key-file" if key_file is not None else "$ZINCIR_ENCRYPTION_KEYS"
        raise click.BadParameter(error.detail, param_hint=hint) from None
    asyncio.run(
        _serve(
            registry,
            address=address,
            namespace=namespace,
            task_queue=task_queue,
            tls=_tls(tls, tls_cert, tls_key, tls_ca, api_key),
            api_key=api_key,
            max_concurrent_activities=max_concurrent_activities,
            shutdown_grace=shutdown_grace,
            content_store=content_store,
            encryption=encryption,
        )
    )
    exit_now(0)


def exit_now(code: int) -> NoReturn:
    """Flush and leave without interpreter teardown, where temporalio's Rust threads can abort
    the process (temporalio/sdk-python issue #300); only once everything is shut down."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover - python -m zincir.temporal._cli
    temporal_worker_command()
