"""The fault journal: concurrent appends stay whole lines, bad lines are skipped and counted, and the summary's
figures match a journal written by hand (expected values worked out by hand in the comments)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from llmscale.runtime import journal as j
from llmscale.runtime.incidents import median_step_s, summarize


def _writer(run_dir: str, rank: int, n: int) -> None:
    for i in range(n):
        j.append(Path(run_dir), j.Event(j.EventKind.MEMORY_SNAPSHOT, attempt=0, config_sha256="ab", step=i, rank=rank,
                                        message="x" * 300))


def test_concurrent_appends_are_whole_lines(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), r, 200)) for r in range(4)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    got = j.read(tmp_path)
    assert got.skipped_lines == 0
    assert len(got.events) == 800
    for rank in range(4):
        assert sorted(e.step for e in got.events if e.rank == rank) == list(range(200))


def test_bad_lines_skipped_and_counted_unknown_keys_kept(tmp_path: Path) -> None:
    j.append(tmp_path, j.Event(j.EventKind.LAUNCH, 0, "ab", time_unix=1.0))
    with open(j.journal_path(tmp_path), "a", encoding="utf-8") as f:
        f.write('{"event": "launch", "attempt": 0, "config_sha\n')  # a writer killed mid-line
        f.write("not json\n")
        f.write('{"event": "no_such_kind", "attempt": 0, "config_sha256": "ab", "time_unix": 2}\n')
        f.write('{"event": "fault", "attempt": "1", "config_sha256": "ab", "time_unix": 2}\n')  # attempt not an int
        f.write('{"event": "fault", "attempt": 1, "config_sha256": "ab", "time_unix": 3, "cause": "cosmic_ray",'
                ' "future_key": [1, 2]}\n')
    got = j.read(tmp_path)
    assert got.skipped_lines == 4
    assert [e.event for e in got.events] == [j.EventKind.LAUNCH, j.EventKind.FAULT]
    assert got.events[1].cause is j.Cause.UNKNOWN
    assert got.events[1].extra == {"future_key": [1, 2]}


def test_event_round_trip(tmp_path: Path) -> None:
    e = j.Event(j.EventKind.FAULT, 3, "cd", time_unix=5.5, rank=1, host="h", exit_code=-9, signal="SIGKILL",
                cause=j.Cause.PROCESS_KILLED, detect_s=0.25, extra={"attempt_pids": [1, 2]})
    j.append(tmp_path, e)
    line = j.journal_path(tmp_path).read_text(encoding="utf-8")
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["cause"] == "process_killed"
    assert j.read(tmp_path).events == (e,)


def _hand_journal(run_dir: Path) -> None:
    ev = j.EventKind
    rows = [
        j.Event(ev.LAUNCH, 0, "s", time_unix=100.0),
        j.Event(ev.ATTEMPT_START, 0, "s", time_unix=100.0),
        j.Event(ev.CHECKPOINT_SAVED, 0, "s", time_unix=110.0, step=10),
        j.Event(ev.FAULT, 0, "s", time_unix=120.0, step=15, rank=1, host="a", cause=j.Cause.PROCESS_KILLED,
                detect_s=0.5),
        j.Event(ev.FAULT, 0, "s", time_unix=120.1, rank=0, host="a", cause=j.Cause.NETWORK),  # same attempt: not new
        j.Event(ev.ATTEMPT_START, 1, "s", time_unix=121.0),
        # restore began at 126 - 2 = 124: restart 124 - 120 = 4 s; the slower rank (2 s) counts
        j.Event(ev.RESTORE, 1, "s", time_unix=125.0, rank=0, tier="storage", restored_step=10, load_s=1.0),
        j.Event(ev.RESTORE, 1, "s", time_unix=126.0, rank=1, tier="storage", restored_step=10, load_s=2.0),
        j.Event(ev.FAULT, 1, "s", time_unix=150.0, step=30, rank=1, host="a", cause=j.Cause.HANG, detect_s=3.0),
        j.Event(ev.ATTEMPT_START, 2, "s", time_unix=151.0),
        j.Event(ev.RESTORE, 2, "s", time_unix=160.0, rank=0, tier="memory", restored_step=28, load_s=1.0),
        j.Event(ev.STOP, 2, "s", time_unix=200.0, reason="completed"),
    ]
    for r in rows:
        j.append(run_dir, r)
    (run_dir / "steps").mkdir()
    (run_dir / "steps" / "rank0.jsonl").write_text("\n".join(json.dumps({"step": i, "step_s": s})
                                                             for i, s in enumerate([0.1, 0.2, 0.3])) + "\n")


def test_a_step_re_run_after_a_resume_counts_once(tmp_path: Path) -> None:
    # steps 1-3 in attempt 0, then 2-3 re-run in attempt 1 (resumed from step 1): the last record per step counts
    rows = [(1, 0, 1.0), (2, 0, 9.0), (3, 0, 9.0), (2, 1, 2.0), (3, 1, 3.0)]
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "rank0.jsonl").write_text("".join(json.dumps({"step": s, "attempt": a, "step_s": t}) + "\n"
                                                            for s, a, t in rows))
    assert median_step_s(tmp_path) == pytest.approx(2.0)   # median of 1, 2, 3 (all five lines: 3.0)


def test_summary_figures_worked_by_hand(tmp_path: Path) -> None:
    _hand_journal(tmp_path)
    step_s = median_step_s(tmp_path)
    assert step_s == pytest.approx(0.2)
    s = summarize(j.read(tmp_path), step_s)
    assert s.attempts == 3
    assert len(s.incidents) == 2
    first, second = s.incidents
    assert (first.cause, first.steps_lost, first.load_s) == ("process_killed", 5, 2.0)   # 15 - 10 steps
    assert first.restart_s == pytest.approx(4.0)
    assert first.lost_s == pytest.approx(0.5 + 4.0 + 2.0 + 5 * 0.2)                      # 7.5 s
    # second: restore began at 160 - 1 = 159: restart 9 s; lost 30 - 28 = 2 steps
    assert second.lost_s == pytest.approx(3.0 + 9.0 + 1.0 + 2 * 0.2)                     # 13.4 s
    assert s.by_cause == {"process_killed": 1, "hang": 1}
    assert s.by_host == {"a": 2} and s.repeat_hosts == {"a": 2} and s.repeat_ranks == {1: 2}
    assert s.wall_s == pytest.approx(100.0) and s.mtbf_s == pytest.approx(50.0)
    assert s.mean_lost_s == pytest.approx((7.5 + 13.4) / 2)
    assert s.checkpoints_saved == 1 and s.stop_reason == "completed"


def test_a_failure_that_strikes_the_restart_does_not_count_every_step_lost(tmp_path: Path) -> None:
    # attempt 0 fails at step 678; attempt 1 is killed while starting (no restore: no step of its own); attempt 2
    # restores step 670 from memory: incident 0 lost 8 steps (was 678: the whole run, "restored" from nothing)
    ev = j.EventKind
    for row in (j.Event(ev.FAULT, 0, "s", time_unix=10.0, step=678, cause=j.Cause.PROCESS_KILLED, detect_s=0.1),
                j.Event(ev.FAULT, 1, "s", time_unix=20.0, steps_lost=0, cause=j.Cause.PROCESS_KILLED, detect_s=0.1),
                j.Event(ev.RESTORE, 2, "s", time_unix=31.0, rank=0, tier="memory", restored_step=670, load_s=1.0)):
        j.append(tmp_path, row)
    first, second = summarize(j.read(tmp_path), 0.5).incidents
    assert (first.steps_lost, first.restored_step, first.restart_s, first.lost_s) == (8, 670, None, None)
    assert (second.steps_lost, second.restart_s, second.lost_s) == (0, pytest.approx(10.0), pytest.approx(11.1))


def test_journal_cli_text_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmscale.cli.main import main

    _hand_journal(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["journal", str(tmp_path), "--json"])
    assert done.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by_cause"] == {"process_killed": 1, "hang": 1} and doc["repeat_ranks"] == {"1": 2}
    with pytest.raises(SystemExit):
        main(["journal", str(tmp_path)])
    out = capsys.readouterr().out
    assert "measured MTBF 50.0 s" in out and "repeat offenders (>= 2 incidents): host a (2), rank 1 (2)" in out
    with pytest.raises(SystemExit) as done:
        main(["journal", str(tmp_path / "nope")])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run_dir = ") and err.count("\n") == 1


def test_attribution_root_cause() -> None:
    from llmscale.runtime.agent import AttemptResult, RankFailure
    from llmscale.runtime.watch import attribute

    term = RankFailure(0, 10, -15, "SIGTERM", "Signal 15")   # sent by the agent after the real failure
    kill = RankFailure(1, 11, -9, "SIGKILL", "Signal 9")
    exit3 = RankFailure(1, 11, 3, None, "To enable traceback ...")
    assert attribute(AttemptResult(False, (term, kill)), None, False, False).rank == 1
    got = attribute(AttemptResult(False, (term, exit3)), None, False, False)
    assert (got.cause, got.rank, got.exit_code) == (j.Cause.PROCESS_EXIT, 1, 3)
    assert attribute(AttemptResult(False, (term, exit3)), None, False, True).cause is j.Cause.CHECKPOINT_IO
    assert attribute(AttemptResult(False, (kill,)), None, True, False).cause is j.Cause.OOM
    shell = RankFailure(0, 12, 137, None, "")                   # 128 + 9: killed, as a shell reports it
    assert attribute(AttemptResult(False, (shell,)), None, False, False).signal == "SIGKILL"
    assert attribute(AttemptResult(False, (term,)), None, False, False).signal == "SIGTERM"
    reset = RankFailure(0, 12, 1, None, "RuntimeError: Connection reset by peer")
    assert attribute(AttemptResult(False, (reset,)), None, False, False).cause is j.Cause.NETWORK
