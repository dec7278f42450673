"""The dashboard's prediction: RUN_DIR/prediction.json when it was made for the run's config, else made once in a
background thread through monitor.predict (the host micro-benchmarks, ~1 min, needs torch) and cached there, so the
page shows "predicting…" meanwhile and the measured vs predicted columns once it is done. Without torch, or without
a config to predict for, the page says why there is no prediction instead of an empty column.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from llmscale.errors import LlmscaleError
from llmscale.monitor.predict import PREDICTION_FILE, Prediction, load_cached

CONFIG_WAIT_S = 2.0
"""How often the thread looks for config.yaml when the dashboard is started before the launch wrote it."""


class PredictionState(str, Enum):
    READY = "ready"
    PREDICTING = "predicting"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


@dataclass(frozen=True)
class PredictionStatus:
    """What the page shows in the predicted column: the prediction, or the state and why."""

    state: PredictionState
    prediction: Prediction | None
    reason: str


def _torch_missing() -> bool:
    return importlib.util.find_spec("torch") is None


def _cached_for(run_dir: Path) -> Prediction | None:
    """prediction.json when it was made for this run's config (a stale one is predicted again)."""
    cached = load_cached(run_dir)
    sha_file = run_dir / "config.sha256"
    sha = sha_file.read_text(encoding="utf-8").strip() if sha_file.is_file() else None
    if cached is None or (sha is not None and cached.config_sha256 not in (None, sha)):
        return None
    return cached


class Predictor:
    """Holds the dashboard's prediction; `start()` begins the background calibration when one is needed."""

    def __init__(self, run_dir: Path, enabled: bool = True) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._status = PredictionStatus(PredictionState.PREDICTING, None, "looking for prediction.json")
        self._thread: threading.Thread | None = None
        self._seen_mtime: int | None = None

    def status(self) -> PredictionStatus:
        """The current prediction; prediction.json is read again when it changed (`llmscale profile
        --refresh-prediction`, or a profile run while the dashboard was predicting)."""
        with self._lock:
            mtime = self._mtime()
            if mtime is not None and mtime != self._seen_mtime:
                cached = self._cached_or_none()
                if cached is not None:
                    self._seen_mtime = mtime
                    self._status = PredictionStatus(PredictionState.READY, cached, "prediction.json")
            return self._status

    def _mtime(self) -> int | None:
        try:
            return (self.run_dir / PREDICTION_FILE).stat().st_mtime_ns
        except OSError:
            return None

    def _cached_or_none(self) -> Prediction | None:
        try:
            return _cached_for(self.run_dir)
        except LlmscaleError:
            return None

    def _set(self, state: PredictionState, prediction: Prediction | None, reason: str) -> None:
        with self._lock:
            self._status = PredictionStatus(state, prediction, reason)

    def start(self) -> None:
        try:
            cached = _cached_for(self.run_dir)
        except LlmscaleError as exc:
            self._set(PredictionState.FAILED, None, str(exc))
            return
        if cached is not None:
            self._set(PredictionState.READY, cached, "prediction.json")
        elif not self.enabled:
            self._set(PredictionState.UNAVAILABLE, None, "no prediction.json and --no-predict given")
        elif _torch_missing():
            self._set(PredictionState.UNAVAILABLE, None, "no prediction.json, and predicting needs torch, which is "
                      "not installed (pip install 'llmscale[measure]', or run `llmscale profile` where it is)")
        else:
            self._thread = threading.Thread(target=self._run, name="llmscale-dashboard-predict", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        from llmscale.monitor.predict import predict
        from llmscale.runtime.config import load_config

        while not (self.run_dir / "config.yaml").is_file():
            self._set(PredictionState.PREDICTING, None, "waiting for config.yaml (written by llmscale launch)")
            if self._stop.wait(CONFIG_WAIT_S):
                return
        self._set(PredictionState.PREDICTING, None, "measuring this host (monitor.predict, ~1 min)")
        try:  # the config's world (dp: the example's layout), not the rank files seen so far
            prediction = predict(self.run_dir, world=load_config(self.run_dir / "config.yaml").layout.dp)
        except (LlmscaleError, OSError, RuntimeError) as exc:
            self._set(PredictionState.FAILED, None, f"prediction failed: {exc}")
            return
        self._set(PredictionState.READY, prediction, "predicted by the dashboard (cached in prediction.json)")

    def close(self) -> None:
        self._stop.set()
