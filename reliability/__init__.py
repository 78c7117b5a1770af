"""zincir's reliability suite: every fault a user will meet, injected and counted.

Each scenario is a module here with ``ORDER`` (its place in ``RELIABILITY.md``), ``TITLE``
and ``run(short: bool) -> Report``. ``python -m reliability`` runs them all at full counts
and rewrites ``RELIABILITY.md``; the tests in ``tests/reliability`` run the short counts and
assert every target.
"""
