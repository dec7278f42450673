"""MFU under the conventions published runs use, beside the headline (`explain`, `plan`).

The headline MFU (cost.step) counts model FLOPs as PaLM does — 6·N plus the full attention core, no causal halving
(Chowdhery et al. 2022 App. B; flops.model_flops_per_token) — over the dense peak of the training precision (an FP8
run against the FP8 peak, as NVIDIA's benchmark READMEs do). Two other conventions give other figures for the same
step: Megatron-LM since commit 8873b55d6a (2025-03-06, `num_floating_point_operations`: MEG2025) and
Megatron-Bridge (`flop_utils.py` `transformer_flops`) count the attention core halved for the causal mask
(validation.conventions), and most papers quote FP8 runs against the BF16 peak. Where one differs from the
headline by more than `SHOWN_ABOVE` the terminal prints it; the JSON always carries them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmscale.cost.flops import model_flops_per_token
from llmscale.cost.step import StepBreakdown
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec

SHOWN_ABOVE = 0.02
"""An alternative MFU is printed when it differs from the headline by more than 2 points."""
HEADLINE = "PaLM count (6N + full attention core, no causal halving) over the training precision's dense peak"


@dataclass(frozen=True)
class MfuConventions:
    """One layout's MFU under each convention (fractions of peak)."""

    headline: float
    causal: float
    """The attention core halved for the causal mask (MEG2025 / Megatron-Bridge `transformer_flops`)."""
    precision: Precision
    peak_tflops: float
    """The dense peak of the training precision (the headline's denominator), TFLOP/s."""
    bf16_peak_tflops: float
    against_bf16: float | None
    """An FP8/FP4 run's headline FLOPs over the BF16 dense peak (None for a 16-bit run)."""
    windowed_layers: int = 0
    """Layers whose attention sees a sliding window (ModelSpec.windowed_layers): every count above takes them as
    full attention."""
    window: int | None = None

    def lines(self) -> list[str]:
        """The alternatives that differ from the headline by more than SHOWN_ABOVE, one line each, naming the
        headline's convention."""
        out = []
        if abs(self.causal - self.headline) > SHOWN_ABOVE:
            out.append(f"MFU {self.headline:.1%} counts the attention core in full (PaLM, no causal halving); with "
                       f"its causal half (MEG2025 / Megatron-Bridge) it is {self.causal:.1%}")
        if self.against_bf16 is not None and abs(self.against_bf16 - self.headline) > SHOWN_ABOVE:
            out.append(f"MFU {self.headline:.1%} is against the {self.precision.value.upper()} dense peak "
                       f"({self.peak_tflops:,.0f} TFLOP/s); against the BF16 peak ({self.bf16_peak_tflops:,.0f}) "
                       f"it is {self.against_bf16:.1%}")
        if self.windowed_layers:
            out.append(f"MFU counts full attention on every layer, as PaLM and Megatron-Bridge do; "
                       f"{self.windowed_layers} layers attend to a {self.window}-token window and do less")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"headline": HEADLINE, "causal_attention_mfu": self.causal, "peak_precision": self.precision.value,
                "peak_tflops_per_gpu": self.peak_tflops, "bf16_peak_mfu": self.against_bf16,
                "windowed_layers_counted_full": self.windowed_layers}


def mfu_conventions(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, step: StepBreakdown,
                    i: int = 0) -> MfuConventions:
    """Layout i's MFU under each convention: the same step time, other FLOPs or another peak."""
    headline = float(step.mfu[i])
    full, causal = (model_flops_per_token(model, train.seq_len, causal=c) for c in (False, True))
    bf16 = cluster.gpu.peak_flops_per_s(Precision.BF16)
    low_precision = train.precision in (Precision.FP8, Precision.FP4)
    return MfuConventions(
        headline=headline, causal=headline * causal / full, precision=train.precision,
        peak_tflops=step.peak_flops_per_s / 1e12, bf16_peak_tflops=bf16 / 1e12,
        against_bf16=headline * step.peak_flops_per_s / bf16 if low_precision else None,
        windowed_layers=model.windowed_layers, window=model.sliding_window,
    )
