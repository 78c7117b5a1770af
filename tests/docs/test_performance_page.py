"""The performance page's figures are exactly what benchmarks/docs_table.py renders from
benchmarks/results.json, the run they were taken in (`make bench` writes both)."""

from __future__ import annotations

import json

from benchmarks import docs_table


def test_the_page_shows_the_figures_of_results_json() -> None:
    result = json.loads(docs_table.RESULTS.read_text(encoding="utf-8"))
    shown = docs_table.shown(docs_table.PAGE.read_text(encoding="utf-8"))
    assert shown == docs_table.render(result), (
        "docs/operations/performance/index.md does not show benchmarks/results.json: "
        "run `python benchmarks/docs_table.py` (or `make bench`)"
    )
