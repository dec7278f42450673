"""The launcher's stop-signal handling (runtime/interrupt.py) from a thread other than the main one."""

from __future__ import annotations

import signal
import threading

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
