"""The reference zincir worker for Temporal: ``python deploy/temporal/worker.py``.

Configured from the environment only (see deploy/temporal/README.md), it serves the
handlers of ``$ZINCIR_REGISTRY`` (``module:attribute``) through ``zincir temporal-worker``.
SIGTERM stops polling, lets running handlers finish within ``$ZINCIR_SHUTDOWN_GRACE``
seconds, then exits 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from zincir.cli import main as zincir

# environment variable -> the worker command's option
OPTIONS = {
    "TEMPORAL_ADDRESS": "--address",
    "TEMPORAL_NAMESPACE": "--namespace",
    "TEMPORAL_TASK_QUEUE": "--task-queue",
    "TEMPORAL_TLS_CERT": "--tls-cert",
    "TEMPORAL_TLS_KEY": "--tls-key",
    "TEMPORAL_TLS_CA": "--tls-ca",
    "ZINCIR_MAX_CONCURRENT_ACTIVITIES": "--max-concurrent-activities",
    "ZINCIR_SHUTDOWN_GRACE": "--shutdown-grace",
    "ZINCIR_CONTENT_STORE": "--content-store",
    "ZINCIR_KEY_FILE": "--key-file",
}


def arguments(environ: Mapping[str, str]) -> list[str]:
    """The ``zincir temporal-worker`` arguments the environment asks for."""
    target = environ.get("ZINCIR_REGISTRY")
    if not target:
        raise SystemExit("set ZINCIR_REGISTRY to the handlers' module:attribute")
    if not environ.get("TEMPORAL_TASK_QUEUE"):
        raise SystemExit("set TEMPORAL_TASK_QUEUE to the queue the TemporalRuntime starts on")
    args = [target]
    for name, option in OPTIONS.items():
        if environ.get(name):
            args += [option, environ[name]]
    if environ.get("TEMPORAL_TLS", "").lower() in ("1", "true", "yes"):
        args.append("--tls")
    # TEMPORAL_API_KEY is read by the command itself (never put on a command line);
    # ZINCIR_APP_VERSION is read by the handlers' runs (see docs/concepts/versions.md)
    return args


def main() -> None:
    """Run the worker until SIGTERM or SIGINT."""
    zincir.main(["temporal-worker", *arguments(os.environ)], prog_name="zincir")


if __name__ == "__main__":
    sys.exit(main())
