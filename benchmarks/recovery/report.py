"""The recovery page (docs/operations/performance/recovery.md): its tables, its plots
(matplotlib, when importable) and the headline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .harness import Cell, Outcome
from .metrics import Figure, Summary

__all__ = ["headline", "write_report"]

_PEER_STORE = {"langgraph": "SqliteSaver", "dbos": "SQLite"}


def _number(value: float | None, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _pair(figure: Figure, digits: int = 1) -> str:
    return f"{_number(figure.mean, digits)} / {_number(figure.worst, digits)}"


def _completed(summary: Summary) -> str:
    ok = round((summary.completed_correctly.mean or 0.0) * summary.seeds)
    return f"{ok}/{summary.seeds}"


def _durability(cell: Cell) -> str:
    if cell.system != "zincir":
        return f"{cell.system} ({_PEER_STORE[cell.system]})"
    return "no store" if cell.durability == "none" else f"zincir {cell.durability}"


def _cell(summary: Summary) -> str:
    cell = summary.cell
    durability = _durability(cell)
    if cell.system != "zincir":
        durability = f"**{durability}**"
    return f"{durability} | {cell.context} | {cell.verification}"


def _table(
    summaries: Sequence[Summary], columns: Sequence[tuple[str, Callable[[Summary], str]]]
) -> list[str]:
    head = "| durability | context | verification | " + " | ".join(t for t, _ in columns) + " |"
    rule = "| --- | --- | --- | " + " | ".join("---:" for _ in columns) + " |"
    rows = [f"| {_cell(s)} | " + " | ".join(f(s) for _, f in columns) + " |" for s in summaries]
    return [head, rule, *rows]


SAFETY: list[tuple[str, Callable[[Summary], str]]] = [
    ("completed correctly", _completed),
    ("duplicate effects", lambda s: _pair(s.duplicate_effects)),
    ("false progress accepted", lambda s: _pair(s.false_progress_accepted)),
    ("kills", lambda s: str(s.kills)),
]
COST: list[tuple[str, Callable[[Summary], str]]] = [
    ("repeated requests / kill", lambda s: _pair(s.repeated_requests_per_kill)),
    ("repeated tool calls / kill", lambda s: _pair(s.repeated_tool_calls_per_kill)),
    ("wasted-work ratio", lambda s: _pair(s.wasted_work_ratio, 3)),
    ("restart → progress ms", lambda s: _pair(s.restart_to_progress_ms, 0)),
    ("after imports ms", lambda s: _pair(s.ready_to_progress_ms, 0)),
    ("context tokens at end", lambda s: _pair(s.context_tokens_end, 0)),
    ("crash-free tokens", lambda s: f"{s.crash_free_tokens:,}"),
    ("crash-free run s", lambda s: f"{s.crash_free_wall_s:.2f}"),
]


def _find(summaries: Sequence[Summary], label: str) -> Summary | None:
    return next((s for s in summaries if s.cell.label == label), None)


def headline(summaries: Sequence[Summary]) -> dict[str, Any]:
    """The figures the README quotes: no store against zincir FULL with a fresh context."""
    zincir = _find(summaries, "zincir/full/fresh/verify")
    replay = _find(summaries, "zincir/full/replay/verify")
    scratch = _find(summaries, "zincir/none/fresh/verify")
    liar_checked = _find(summaries, "zincir/full/fresh/verify-liar")
    liar_unchecked = _find(summaries, "zincir/full/fresh/none-liar")
    figures: dict[str, Any] = {}
    if zincir and scratch:
        figures["wasted_zincir"] = zincir.wasted_work_ratio.mean
        figures["wasted_scratch"] = scratch.wasted_work_ratio.mean
        figures["duplicates_scratch"] = scratch.duplicate_effects.mean
        figures["requests_per_kill_zincir"] = zincir.repeated_requests_per_kill.mean
        figures["requests_per_kill_scratch"] = scratch.repeated_requests_per_kill.mean
    if zincir and replay:
        figures["context_end_fresh"] = zincir.context_tokens_end.mean
        figures["context_end_replay"] = replay.context_tokens_end.mean
        figures["tokens_fresh"] = zincir.crash_free_tokens
        figures["tokens_replay"] = replay.crash_free_tokens
    zincir_cells = [
        s for s in summaries if s.cell.system == "zincir" and s.cell.durability != "none"
    ]
    figures["duplicates_zincir_worst"] = max(
        (s.duplicate_effects.worst or 0.0 for s in zincir_cells), default=None
    )
    if liar_checked and liar_unchecked:
        figures["false_progress_verified"] = liar_checked.false_progress_accepted.worst
        figures["false_progress_unverified"] = liar_unchecked.false_progress_accepted.mean
    for system in ("zincir", "langgraph", "dbos"):
        found = _find(summaries, f"{system}/full/fresh/verify")
        if found:
            figures[f"restart_to_progress_ms_{system}"] = found.restart_to_progress_ms.mean
            figures[f"ready_to_progress_ms_{system}"] = found.ready_to_progress_ms.mean
            figures[f"wasted_{system}"] = found.wasted_work_ratio.mean
            figures[f"duplicates_{system}_worst"] = found.duplicate_effects.worst
    return figures


def _headline_lines(figures: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The headline in sentences, from the figures present."""
    lines = ["## Headline", ""]
    if "wasted_zincir" in figures:
        lines.append(
            f"- **Wasted work.** {settings['kills']} kills a run cost zincir (FULL, fresh "
            f"context, verified checkpoints) {figures['wasted_zincir']:.3f}× the crash-free "
            f"tokens and {figures['requests_per_kill_zincir']:.2f} repeated model requests a "
            f"kill; restarting from scratch without a store cost {figures['wasted_scratch']:.2f}× "
            f"and {figures['requests_per_kill_scratch']:.1f}."
        )
        worst = figures["duplicates_zincir_worst"]
        zincir = (
            "none in any zincir cell"
            if not worst
            else f"{worst:.0f} in the worst run of a zincir cell"
        )
        lines.append(
            f"- **Duplicate effects:** {zincir}; without a store, "
            f"{figures['duplicates_scratch']:.1f} a run on average."
        )
    if "false_progress_verified" in figures:
        lines.append(
            f"- **False progress.** With verified checkpoints the lying agent got "
            f"{figures['false_progress_verified']:.0f} false claims accepted (worst seed); "
            f"unverified, {figures['false_progress_unverified']:.1f} a run, each a subtask "
            "never done."
        )
    if "context_end_fresh" in figures:
        lines.append(
            f"- **Context.** The fresh context (`ctx.state()`) ends at "
            f"{figures['context_end_fresh']:,.0f} tokens against "
            f"{figures['context_end_replay']:,.0f} for replaying the whole log; a crash-free "
            f"run costs {figures['tokens_fresh']:,} tokens against {figures['tokens_replay']:,}."
        )

    def restart(system: str) -> str:
        total = figures[f"restart_to_progress_ms_{system}"]
        ready = figures.get(f"ready_to_progress_ms_{system}")
        after = "" if ready is None else f" ({ready:,.0f} after imports)"
        return f"{system} {total:,.0f} ms{after}"

    peers = [
        restart(system)
        for system in ("langgraph", "dbos")
        if figures.get(f"restart_to_progress_ms_{system}") is not None
    ]
    if peers and figures.get("restart_to_progress_ms_zincir") is not None:
        duplicates = [
            figures.get(f"duplicates_{system}_worst") for system in ("zincir", "langgraph", "dbos")
        ]
        single = all(value in (None, 0, 0.0) for value in duplicates)
        lines.append(
            "- **Restart to new progress** (fresh context, verified): "
            + ", ".join([restart("zincir"), *peers])
            + (
                "; no system applied an effect twice, since each replays the recorded tool call id."
                if single
                else "."
            )
        )
    return lines


def _plots(folder: Path, summaries: Sequence[Summary], curves: dict[str, Outcome]) -> list[str]:
    """The PNGs beside the report; their file names (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = []
    honest = [s for s in summaries if s.cell.verification == "verify"]
    labels = [_durability(s.cell).replace(" (", "\n(") + f"\n{s.cell.context}" for s in honest]
    for name, title, pick in (
        (
            "recovery-wasted-work.png",
            "Tokens spent / crash-free tokens (mean, worst)",
            lambda s: s.wasted_work_ratio,
        ),
        (
            "recovery-duplicates.png",
            "Duplicate external effects per run (mean, worst)",
            lambda s: s.duplicate_effects,
        ),
        (
            "recovery-restart.png",
            "Restart to first new progress, ms (mean, worst)",
            lambda s: s.restart_to_progress_ms,
        ),
    ):
        figure, axes = plt.subplots(figsize=(max(6.0, 0.9 * len(honest)), 3.6))
        means = [pick(s).mean or 0.0 for s in honest]
        worsts = [pick(s).worst or 0.0 for s in honest]
        positions = range(len(honest))
        axes.bar(positions, means, color="#4c72b0", label="mean over seeds")
        axes.scatter(positions, worsts, color="#c44e52", marker="_", s=300, label="worst seed")
        axes.set_xticks(list(positions), labels, fontsize=7)
        axes.set_title(title + " — verification on, honest agent", fontsize=9)
        axes.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(folder / name, dpi=110)
        plt.close(figure)
        names.append(name)
    if curves:
        figure, axes = plt.subplots(figsize=(6.0, 3.4))
        for label, outcome in curves.items():
            axes.plot(outcome.context_curve, label=label)
        axes.set_xlabel("model request")
        axes.set_ylabel("context tokens sent")
        axes.set_title(
            "Context size per request, crash-free run (the same on every system)", fontsize=9
        )
        axes.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(folder / "recovery-context.png", dpi=110)
        plt.close(figure)
        names.append("recovery-context.png")
    return names


def write_report(
    path: Path,
    summaries: Sequence[Summary],
    curves: dict[str, Outcome],
    settings: dict[str, Any],
    notes: Sequence[str],
) -> dict[str, Any]:
    """Write the report (and its plots beside it); the headline figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plots = _plots(path.parent, summaries, curves)
    figures = headline(summaries)
    lines = [
        "# Recovery benchmark: how much work a crash costs",
        "",
        "Generated by `make bench-recovery` (`benchmarks/recovery/run.py`); do not edit by hand.",
        "",
        _INTRO.format(**settings),
        "",
        *_headline_lines(figures, settings),
        "",
        "Each figure is **mean / worst** over the seeds (worst: the highest, or for *completed",
        "correctly* the seeds that did). *Per kill* divides a run's surplus over the crash-free",
        "run of its cell by the kills that run took; *wasted-work ratio* is the simulated tokens",
        "a run spent over its cell's crash-free run (1.000: a crash cost no model work);",
        "*crash-free run s* is that run's wall time, one process from spawn to exit.",
        "",
        "## Safety",
        "",
        *_table(summaries, SAFETY),
        "",
        "## Cost of a crash",
        "",
        *_table(summaries, COST),
        "",
    ]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{name}]({name})" for name in plots]
        lines.append("")
    else:
        lines += ["(matplotlib is not installed: tables only.)", ""]
    lines += ["## Reading the tables", "", *_READING, ""]
    if notes:
        lines += ["## Notes on this run", "", *[f"- {note}" for note in notes], ""]
    path.write_text("\n".join(lines))
    return figures


_INTRO = """\
A scripted agent (no network) completes a task of {subtasks} subtasks. Each subtask is one
model request asking for one tool call; the tool applies an external effect to an
idempotent ledger outside the store (keyed by the tool call id the model handed out) and
publishes an artifact file. Every {every} subtasks the model claims its progress and the run
checkpoints it (`AgentContext.checkpoint`), with a verifier that reads the artifacts. The
model charges simulated tokens for the context it is sent (4 characters a token, plus 25 for
its answer) and takes 2 ms plus 0.5 ms per 1,000 tokens.

Each run is killed {kills} times with SIGKILL at points drawn from its seed (a subtask and a
moment in it: the model answered, the effect is applied, the artifact is written, the result
is recorded, or at the end of a round the verifier decided and its decision is not stored)
and restarted each time as a new process, until it finishes; {seeds} seeds, the same kill
schedule for every cell of a seed. The process sends itself the SIGKILL when it reaches the
point, as `zincir.testing.crash_point` does; a kill waiting at a subtask the agent skipped
never comes (the *kills* column counts those that did).
Dimensions varied independently:

- **durability**: *no store* (the context lives in memory; a restart starts from the task),
  zincir `synchronous="normal"`, zincir `"full"`;
- **context**: *replay* (the whole log is the model's context) or *fresh* (the latest
  accepted checkpoint plus the events after it: `ctx.state()`);
- **verification**: *none* (every claim accepted), *verify* (each claimed subtask's artifact
  must exist), *verify-liar* (verify, with an agent that claims one undone subtask at every
  third checkpoint) and, as a control, *none-liar* (the same liar, unchecked)."""

_READING = [
    "- *Duplicate effects* counts effects the ledger applied beyond one per subtask. A",
    "  restarted agent without a store asks the model again, which hands out a new tool call",
    "  id, so the ledger cannot recognise the repeat. zincir replays the stored response, so",
    "  the same id reaches the ledger and the repeat is answered, not applied.",
    "- *Repeated tool calls* are calls the ledger answered again: at-least-once recovery of an",
    "  intent whose result was not recorded when the process died (the contract's promise).",
    "- *False progress accepted* counts claimed subtasks with no effect in the ledger at the",
    "  moment the claim was accepted (an audit beside the verifier, which reads only the",
    "  artifacts). An accepted false claim makes the agent skip that subtask for good.",
    "- *Restart → progress* runs from spawning the restarted process (interpreter start and",
    "  imports included: see the notes) to its first effect on a subtask no earlier process",
    "  had done. zincir takes the dead owner's run with `force_recover` (the harness reaped",
    "  the process) and rebuilds the context from the log or from `ctx.state()`. LangGraph",
    "  invokes the thread again from its last checkpoint. DBOS recovers a pending workflow at",
    "  launch by putting it back on its internal queue, polled once a second, and replays",
    "  every finished step of the workflow from its recorded output.",
    "- *After imports* is the same interval from the moment the restarted process finished",
    "  importing its system (zincir, LangGraph or DBOS): what the system's own recovery took.",
    "- On LangGraph and DBOS the claim and its verification are the same application code (a",
    "  graph node, a workflow step): neither has a checkpoint verifier of its own.",
    '- `synchronous="normal"` loses nothing when only the process dies, as here; it differs',
    '  from `"full"` on power loss, which this benchmark does not inject.',
]
