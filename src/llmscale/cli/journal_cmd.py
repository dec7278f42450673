"""`llmscale journal RUN_DIR [--json]`: the fault journal of a run, summarized (runtime/incidents.py). torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.cli import options as o
from llmscale.errors import LlmscaleError
from llmscale.report.strict_json import strict_dumps


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _text(summary: object, run_dir: Path) -> str:
    from llmscale.runtime.incidents import JournalSummary

    assert isinstance(summary, JournalSummary)
    s = summary
    lines = [f"# journal {run_dir}", f"# attempts {s.attempts}   incidents {len(s.incidents)}   wall {s.wall_s:.1f} s"
             f"   measured MTBF {_s(s.mtbf_s, 1)} s   median step {_s(s.step_s, 4)} s",
             f"# storage checkpoints committed {s.checkpoints_saved}   checkpoint failures {s.checkpoint_failures}"
             f"   stop: {s.stop_reason or '(running or no stop recorded)'}"]
    if s.skipped_lines:
        lines.append(f"# {s.skipped_lines} unparseable line(s) skipped")
    if s.excluded_hosts:
        lines.append("# excluded hosts: " + "; ".join(f"{h} ({r or 'no reason given'})"
                                                      for h, r in s.excluded_hosts.items()))
    if s.hosts:
        lines.append(f"# hosts of the last attempt: {', '.join(s.hosts)}")
    header = f"{'attempt':>7} {'cause':<15} {'host':<14} {'rank':>4} {'step':>6} {'restored':>8} {'tier':<7} " \
             f"{'lost':>5} {'detect':>7} {'restart':>7} {'load':>6} {'lost_s':>7}"
    units = f"{'':>7} {'':<15} {'':<14} {'':>4} {'':>6} {'step':>8} {'':<7} {'steps':>5} {'s':>7} {'s':>7} " \
            f"{'s':>6} {'s':>7}"
    lines += [header, units]
    for i in s.incidents:
        lines.append(f"{i.attempt:>7} {i.cause:<15} {(i.host or '-')[:14]:<14} {'-' if i.rank is None else i.rank:>4} "
                     f"{'-' if i.step is None else i.step:>6} "
                     f"{'-' if i.restored_step is None else i.restored_step:>8} {i.restored_tier or '-':<7} "
                     f"{'-' if i.steps_lost is None else i.steps_lost:>5} {_s(i.detect_s):>7} {_s(i.restart_s):>7} "
                     f"{_s(i.load_s):>6} {_s(i.lost_s):>7}")
    lines.append("by cause: " + (", ".join(f"{k} {v}" for k, v in s.by_cause.items()) or "none"))
    lines.append("by host:  " + (", ".join(f"{k} {v}" for k, v in s.by_host.items()) or "none"))
    offenders = [f"host {h} ({n})" for h, n in s.repeat_hosts.items()]
    offenders += [f"rank {r} ({n})" for r, n in s.repeat_ranks.items()]
    lines.append("repeat offenders (>= 2 incidents): " + (", ".join(offenders) or "none"))
    lines.append(f"time lost per incident: mean {_s(s.mean_lost_s)} s, total {_s(s.total_lost_s)} s "
                 "(detect + restart + load + steps lost x median step)")
    return "\n".join(lines)


def journal(
    run_dir: Annotated[Path, typer.Argument(help="the run directory (holds journal.jsonl)", show_default=False)],
    as_json: o.JsonOpt = False,
) -> None:
    """Summarize a run's fault journal: incidents by cause and host, repeat offenders, measured MTBF, time lost."""
    from llmscale.runtime.incidents import median_step_s, summarize
    from llmscale.runtime.journal import journal_path, read

    if not run_dir.is_dir():
        raise LlmscaleError(f"run_dir = {str(run_dir)!r}: not a directory")
    if not journal_path(run_dir).is_file():
        raise LlmscaleError(f"run_dir = {str(run_dir)!r}: has no journal.jsonl (was it launched with llmscale launch?)")
    try:
        summary = summarize(read(run_dir), median_step_s(run_dir))
    except OSError as exc:
        raise LlmscaleError(f"run_dir = {str(run_dir)!r}: cannot read the journal ({exc.strerror})") from None
    typer.echo(strict_dumps(summary.to_dict()) if as_json else _text(summary, run_dir))
