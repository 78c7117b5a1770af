"""The payload documents' public import path: ``zincir.contract.payloads``, re-exported.

The documents live in the operation contract (``zincir.contract.payloads``); this module keeps
``import zincir.payloads`` and ``from zincir.payloads import ModelRequest`` working. Both names
refer to the same classes and functions, and share one ``__all__``.
"""

from .contract.payloads import *  # noqa: F403 (the contract module's __all__, nothing else)
from .contract.payloads import __all__ as __all__
