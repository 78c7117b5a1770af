"""How long a prefix a new text shares with an earlier one, known where both were built.

A model request's text is joined from its messages' texts: when it is joined from the same
leading parts as the step's previous request (the same string objects, or equal short
ones), the two texts share those parts' characters, and the input's cut resumes there
without comparing megabytes of conversation. Only the code that joined both texts notes
this, so a note is a fact by construction; a text with no note is compared as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

__all__ = ["note_shared", "take_shared"]

_KEPT: Final = 8
"""How many notes not yet taken are kept (the latest): each holds two texts alive."""

_NOTES: OrderedDict[int, tuple[str, str, int]] = OrderedDict()
_LOCK: Final = threading.Lock()


def note_shared(text: str, earlier: str, length: int) -> None:
    """``text[:length] == earlier[:length]``: both were joined from the same leading parts."""
    if not 0 < length <= min(len(text), len(earlier)):
        return
    with _LOCK:
        _NOTES.pop(id(text), None)
        _NOTES[id(text)] = (text, earlier, length)
        while len(_NOTES) > _KEPT:
            _NOTES.popitem(last=False)


def take_shared(text: str, earlier: str) -> int:
    """How many leading characters ``text`` is known to share with ``earlier`` (0 when
    nothing is noted for this pair: the caller compares). The note is taken: the input's
    cut keeps what it learnt, and the texts are no longer held for it."""
    with _LOCK:
        found = _NOTES.get(id(text))
        if found is None or found[0] is not text or found[1] is not earlier:
            return 0
        del _NOTES[id(text)]
    return found[2]
