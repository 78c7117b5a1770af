"""``python -m zincir`` runs the command line."""

from .cli import run

run()
