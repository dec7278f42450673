"""The launcher's stop-signal handling (runtime/interrupt.py) from a thread other than the main one, and a trainer's
error record for the agent (runtime/entry.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from llmscale.runtime.interrupt import STOP_SIGNALS, interruptible, shielded


def test_stop_signal_contexts_change_nothing_off_the_main_thread() -> None:
    # Python lets only the main thread install handlers: `shielded` (the supervisor's clean-up after a stop) raised
    # ValueError when `launch` ran in a thread, where `interruptible` was already skipped by its caller
    errors: list[BaseException] = []
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def body() -> None:
        try:
            with interruptible(), shielded():
                pass
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert errors == []
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before


def test_stop_signal_contexts_install_and_restore_on_the_main_thread() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    with shielded():
        assert all(signal.getsignal(sig) is signal.SIG_IGN for sig in STOP_SIGNALS)
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before


def test_a_trainers_error_record_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's agent reads every rank's error file once one rank dies; a record written in place was once caught
    # empty (the chaos test's fault journaled as unknown, "JSONDecodeError: Expecting value")
    from llmscale.runtime import entry, files

    target = tmp_path / "error.json"
    seen: list[tuple[bool, dict[str, object]]] = []
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        seen.append((Path(dst).exists(), json.loads(Path(src).read_text())))
        real_replace(src, dst)

    monkeypatch.setenv(entry.ENV_ERROR_FILE, str(target))
    monkeypatch.setattr(files.os, "replace", replace)
    entry.record_error(RuntimeError("gloo: connection closed by peer\nsecond line"))
    assert seen == [(False, json.loads(target.read_text()))]
    assert json.loads(target.read_text())["message"] == "RuntimeError: gloo: connection closed by peer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json"]
