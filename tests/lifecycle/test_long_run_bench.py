"""The long-run benchmark at 20 turns: one real run in a child process, resumed in another."""

from __future__ import annotations

from pathlib import Path

from benchmarks import long_run


def test_the_long_run_benchmark_reports_its_figures(tmp_path: Path) -> None:
    result = long_run.measure(20, folder=str(tmp_path), resumes=1, peers_python=None)
    figures, ratios, curve = result["figures"], result["ratios"], result["curves"]["zincir"]
    content = figures["long_run_turn_content_bytes"]
    assert 2048 < content < 2200
    # Bytes read at every mark, growing with the run, the conversation all stored.
    assert sorted(curve) == long_run.marks_for(20)
    sizes = [curve[mark] for mark in sorted(curve)]
    assert sizes == sorted(sizes)
    assert curve[20] - curve[0] > 20 * content
    assert figures["long_run_bytes_per_turn_18_20"] > content
    assert 0 < figures["long_run_turn_ms_1_2"] < 1000
    assert 0 < figures["long_run_turn_ms_18_20"] < 1000
    # The unfinished run resumed in a new process up to the model's next request.
    assert 0 < figures["long_run_resume_20_ms"] < figures["long_run_resume_20_process_ms"]
    assert set(ratios) == {
        "long_run_bytes_per_turn_late_over_early",
        "long_run_bytes_per_turn_over_bound",
        "long_run_turn_time_late_over_early",
    }
    assert "skipped" in result["notes"]["long_run_sqlitesaver"]
    assert list(tmp_path.iterdir()) == []  # the databases are removed


def test_windows_at_a_thousand_turns_are_those_of_the_targets() -> None:
    assert long_run.windows(1000) == {
        "bytes_early": (50, 150),
        "bytes_late": (900, 1000),
        "time_early": (10, 100),
        "time_late": (900, 1000),
    }
    assert {0, 50, 150, 300, 900, 1000} <= set(long_run.marks_for(1000))
