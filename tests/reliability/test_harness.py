"""The reliability report: targets judged, failures named, the Markdown a reader sees."""

from __future__ import annotations

from reliability import __main__ as runner
from reliability._harness import Report, at_least, at_most, equal


def test_targets_are_judged_and_misses_named() -> None:
    report = Report(
        "claim_race",
        "Claim race",
        [equal("double grants", 1, 0), at_most("p99 s", 0.2, 0.5), at_least("rounds", 9, 10)],
    )
    assert not report.ok
    assert report.failures() == [
        "claim_race: double grants = 1 (target = 0)",
        "claim_race: rounds = 9 (target ≥ 10)",
    ]
    assert Report("x", "X", [equal("lost", 0, 0)]).ok


def test_the_markdown_shows_each_figure_and_its_command() -> None:
    report = Report("claim_race", "Claim race", [equal("double grants", 0, 0)], ["a note"])
    report.short = True
    text = runner.render([report])
    assert "## Claim race" in text
    assert "`python -m reliability --only claim_race --short`" in text
    assert "| double grants | 0 | = 0 | yes |" in text
    assert "- a note" in text
    assert "Targets met: 1 of 1 scenarios" in text


def test_an_update_rewrites_only_the_sections_run_and_keeps_the_order() -> None:
    first = Report("a", "Alpha", [equal("lost", 1, 0)])
    second = Report("b", "Beta", [equal("lost", 0, 0)], ["kept"])
    text = runner.render([first, second])
    assert "Targets met: 1 of 2 scenarios" in text
    fixed = Report("a", "Alpha", [equal("lost", 0, 0)])
    updated = runner.update(text, [fixed], ["Alpha", "Beta"])
    assert "Targets met: 2 of 2 scenarios" in updated
    assert updated.index("## Alpha") < updated.index("## Beta")
    assert "| lost | 1 |" not in updated and "- kept" in updated
    added = runner.update(updated, [Report("c", "Gamma", [equal("x", 0, 0)])], ["Gamma", "Alpha"])
    assert added.index("## Gamma") < added.index("## Alpha") < added.index("## Beta")
    assert "Targets met: 3 of 3 scenarios" in added
