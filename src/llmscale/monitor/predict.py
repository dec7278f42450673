"""llmscale's predicted step breakdown for a run's own model, layout and host, cached as RUN_DIR/prediction.json: the
probe's host micro-benchmarks (measure/runhost.py) → a `cpu-host` ClusterSpec → `probe_predict.predict` for the
example GPT's ModelSpec (nanoGPT's layout, karpathy/nanoGPT@93a43d9 model.py), on a Llama-style calibration twin.
What is matched and what is not predicted: docs/monitoring.md#monitor-predict.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale import __version__
from llmscale.errors import InputFileError
from llmscale.specs.bounds import MAX_SECONDS
from llmscale.specs.model import ModelSpec, Norm

FORMAT = 1
PREDICTION_FILE = "prediction.json"


@dataclass(frozen=True)
class Prediction:
    """A predicted step (seconds per part, the contract's phase names) and what it was made for."""

    config_sha256: str | None
    world_size: int
    phases_s: dict[str, float]
    peak_flops_per_s_per_rank: float
    """The host's measured fp32 GEMM rate per rank (the cpu-host 'GPU' peak): MFU's denominator."""
    model_flops_per_token: float
    detail: dict[str, Any]

    @property
    def step_s(self) -> float:
        return sum(self.phases_s.values())

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "llmscale_version": __version__, "config_sha256": self.config_sha256,
                "world_size": self.world_size, "phases_s": self.phases_s, "step_s": self.step_s,
                "peak_flops_per_s_per_rank": self.peak_flops_per_s_per_rank,
                "model_flops_per_token": self.model_flops_per_token, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        """The prediction a document holds; a ValueError when a time is negative or not finite, or a rate is not
        positive (a hand-edited file predicted a step of −7.9 s)."""
        try:
            made = cls(data.get("config_sha256"), int(data["world_size"]),
                       {k: float(v) for k, v in data["phases_s"].items()}, float(data["peak_flops_per_s_per_rank"]),
                       float(data["model_flops_per_token"]), dict(data.get("detail", {})))
        except OverflowError:  # an integer beyond any float (10^400): name the field
            numbers = {**{f"phases_s.{k}": v for k, v in data["phases_s"].items()},
                       **{k: data[k] for k in ("peak_flops_per_s_per_rank", "model_flops_per_token")}}
            field = next((k for k, v in numbers.items() if _too_large(v)), "a number")
            digits = int(abs(numbers.get(field, 0)).bit_length() * math.log10(2))
            raise ValueError(f"{field} = an integer of about 10^{digits} is out of range (beyond any float)") from None
        bad = next((f"phases_s.{k} = {v}" for k, v in made.phases_s.items() if not 0 <= v <= MAX_SECONDS), None)
        for name, value in (("peak_flops_per_s_per_rank", made.peak_flops_per_s_per_rank),
                            ("model_flops_per_token", made.model_flops_per_token)):
            if bad is None and not (0 < value < math.inf):
                bad = f"{name} = {value}"
        if bad is None and made.world_size < 1:
            bad = f"world_size = {made.world_size}"
        if bad is not None:
            raise ValueError(f"{bad} is out of range")
        return made


def _corpus_vocab(cfg: Any) -> int:
    """Distinct characters of the corpus (the example's character tokenizer, runtime/example/data.py), when the
    config leaves vocab out."""
    from llmscale.runtime.example.data import corpus_text

    return len(set(corpus_text(cfg.data.path)))


def run_model_spec(cfg: Any) -> ModelSpec:
    """The run's model as llmscale plans it (module docstring)."""
    from llmscale.io.resolve import resolve_model

    m = cfg.model
    if isinstance(m, str):
        return resolve_model(m)
    return ModelSpec(name=f"{cfg.name}-gpt", layers=m.n_layer, hidden=m.d_model, ffn_hidden=4 * m.d_model,
                     heads=m.n_head, vocab=m.vocab_size or _corpus_vocab(cfg), tied_embeddings=True, gated_mlp=False,
                     norm=Norm.LAYERNORM, linear_bias=True, learned_position_embeddings=m.seq_len,
                     source="the run's example GPT (monitor/predict.py)")


def twin_spec(model: ModelSpec) -> ModelSpec:
    return ModelSpec(name=f"{model.name}-probe-twin", layers=model.layers, hidden=model.hidden,
                     ffn_hidden=2 * model.hidden, heads=model.heads, vocab=model.vocab,
                     source="probe-buildable twin of the run's model, for the host micro-benchmarks")


def _param_shapes(model: ModelSpec, seq_len: int) -> tuple[tuple[int, ...], ...]:
    h, f = model.hidden, model.ffn_hidden
    layer = [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (f, h), (f,), (h, f), (h,)]
    return ((model.vocab, h), (seq_len, h), *layer * model.layers, (h,), (h,))


def _seq_len(cfg: Any, model: ModelSpec) -> int:
    return cfg.model.seq_len if not isinstance(cfg.model, str) else 2048


def calibrate(cfg: Any, world: int, config_sha256: str | None) -> Prediction:
    """Run the host micro-benchmarks on `world` gloo ranks and predict (module docstring). Needs torch."""
    from llmscale.cost.flops import model_flops_per_token
    from llmscale.io.catalog import load_constants
    from llmscale.measure import require_torch

    require_torch()
    from llmscale.measure.launch import launch
    from llmscale.measure.probe_predict import ProbeSetup, host_cluster, predict
    from llmscale.measure.probe_worker import WorkerConfig
    from llmscale.measure.runhost import HostBenchConfig, host_rank

    model = run_model_spec(cfg)
    seq = _seq_len(cfg, model)
    mbs = cfg.batch.micro_batch_size
    micro = max(cfg.batch.global_batch_size // (world * mbs), 1)
    twin = twin_spec(model)
    bench = HostBenchConfig(WorkerConfig(model=twin, seq_len=seq, mbs=mbs, micro_batches=micro, steps=0, warmup=0,
                                         ep=1, seed=0), _param_shapes(model, seq))
    raw = launch(host_rank, bench, world, "gloo")
    constants = load_constants()
    setup = ProbeSetup(model=twin, nproc=world, ep=1, seq_len=seq, mbs=mbs, micro_batches=micro)
    cluster, checks = host_cluster(setup, raw["ranks"], constants.comm)
    split, matched = predict(ProbeSetup(model=model, nproc=world, ep=1, seq_len=seq, mbs=mbs, micro_batches=micro),
                             cluster, constants)
    phases = {"data": 0.0, "compute": split.compute_s, "comm": split.comm_s, "checkpoint": 0.0, "idle": split.idle_s}
    detail = {"split": split.as_dict(), "matched": matched, "model": model.model_dump(mode="json"),
              "twin_model": twin.name, "seq_len": seq, "micro_batch_size": mbs, "micro_batches": micro,
              "host_cluster": cluster.model_dump(mode="json"), "collectives": checks, "created_unix": time.time(),
              "peak_is": "fp32 GEMM rate of one rank measured while every rank ran it (probe_predict.host_gpu)"}
    return Prediction(config_sha256, world, phases, cluster.gpu.peak_bf16_tflops * 1e12,
                      model_flops_per_token(model, seq, causal=True), detail)


def load_cached(run_dir: Path) -> Prediction | None:
    path = run_dir / PREDICTION_FILE
    if not path.is_file():
        return None
    try:
        return Prediction.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # AttributeError: phases_s not a mapping
        raise InputFileError(f"{path}: not a prediction llmscale wrote ({exc}); delete it to predict again") from None


def predict(run_dir: Path, world: int | None = None, refresh: bool = False) -> Prediction:
    """RUN_DIR/prediction.json if it was made for this config and world size, else a new one (written there)."""
    from llmscale.monitor.rundir import read_run
    from llmscale.runtime.config import load_config

    snap = read_run(run_dir)
    world = world or len(snap.ranks) or None
    cached = None if refresh else load_cached(run_dir)
    if cached is not None and cached.config_sha256 == snap.config_sha256 and world in (None, cached.world_size):
        return cached
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise InputFileError(f"{run_dir}: no config.yaml (llmscale launch writes it): nothing to predict for")
    cfg = load_config(config)
    prediction = calibrate(cfg, world or cfg.layout.dp, snap.config_sha256)
    (run_dir / PREDICTION_FILE).write_text(json.dumps(prediction.as_dict(), indent=1, allow_nan=False) + "\n",
                                           encoding="utf-8")
    return prediction


def _too_large(value: Any) -> bool:
    """An integer no float holds."""
    try:
        float(value)
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return False
