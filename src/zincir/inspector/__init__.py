"""The read-only run inspector (``zincir ui``), behind the ``ui`` extra.

Importing it without Starlette, uvicorn and Jinja2 raises an ImportError that names the
extra; the core package never imports them.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        f'the zincir inspector needs the "ui" extra ({error.name} is missing): '
        'pip install "zincir[ui]"'
    ) from error

from ._app import create_app
from ._cli import serve, ui_command
from ._db import InspectorDatabase
from ._security import UIAddress, address_from_env, parse_address

__all__ = [
    "InspectorDatabase",
    "UIAddress",
    "address_from_env",
    "create_app",
    "parse_address",
    "serve",
    "ui_command",
]
