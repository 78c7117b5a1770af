"""The package version, in one place: ``pyproject.toml`` reads it (``[tool.hatch.version]``)."""

__version__ = "0.1.0"
