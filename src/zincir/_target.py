"""Importing ``module:attribute`` targets named on the command line."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

__all__ = ["import_target"]


def import_target(target: str, *, example: str) -> Any:
    """The object named by ``module:attribute`` (dotted attributes too), importable from the
    current folder; a bad target is a usage error naming ``example``."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(
            f"expected module:attribute (e.g. {example}), not {target!r}", param_hint="TARGET"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {error}", param_hint="TARGET"
        ) from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {attribute!r}", param_hint="TARGET"
            ) from None
    return value
