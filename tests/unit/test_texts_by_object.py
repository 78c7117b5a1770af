"""TextsByObject: a value per live object, dropped with the object."""

from __future__ import annotations

import gc

from zincir.contract._texts import TextsByObject


class Thing:
    pass


def test_a_text_lives_as_long_as_its_object() -> None:
    texts: TextsByObject[Thing, str] = TextsByObject()
    one, two = Thing(), Thing()
    texts.put(one, "one")
    texts.put(two, "two")
    assert (texts.get(one), texts.get(two), len(texts)) == ("one", "two", 2)
    del one
    gc.collect()
    assert len(texts) == 1
    assert texts.get(two) == "two"


def test_a_new_object_at_a_dead_ones_address_has_no_text() -> None:
    texts: TextsByObject[Thing, str] = TextsByObject()
    for _ in range(200):  # CPython reuses freed addresses: none may inherit a text
        thing = Thing()
        assert texts.get(thing) is None
        texts.put(thing, "old")
        del thing
    assert len(texts) == 0
