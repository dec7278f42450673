"""The MoE layer of `explain`, part by part (cost.moe_layer): the JSON entry and the terminal table read the same
listing."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from llmscale.cost.moe_layer import MoeLayerParts, moe_layer_parts
from llmscale.io.resolve import Job

MS = 1e3


def moe_layer(job: Job, i: int = 0) -> MoeLayerParts | None:
    """Layout i's MoE layer listing; None for a dense model."""
    if not job.model.is_moe:
        return None
    return moe_layer_parts(job.model, job.cluster, job.train, job.layouts, job.constants, i)


def moe_layer_document(job: Job, i: int = 0) -> dict[str, Any] | None:
    """The `moe_layer` entry of `explain --json` (SI units: seconds, FLOP, bytes); null for a dense model."""
    listing = moe_layer(job, i)
    if listing is None:
        return None
    return {"parts": [asdict(p) for p in listing.parts], "gpu_s": listing.gpu_s, "host_s": listing.host_s,
            "host_call_s": listing.host_call_s, "local_experts": listing.local_experts,
            "tokens_per_expert": listing.tokens_per_expert, "host_synced": listing.synced,
            "grouped_gemm": job.train.moe_grouped_gemm_impl.value, "dispatcher": job.train.moe_dispatcher.value,
            "cuda_graph_scope": job.train.cuda_graph_scope.value if job.resolved_layout.cuda_graphs else None}


def moe_layer_table(console: Console, job: Job, i: int = 0) -> None:
    """One MoE layer and micro-batch on the busiest EP rank, forward + backward: GPU ms, amount, host calls."""
    listing = moe_layer(job, i)
    if listing is None:
        return
    train = job.train
    graphs = train.cuda_graph_scope.value if job.resolved_layout.cuda_graphs else "none"
    table = Table(title=f"MoE layer, one micro-batch, forward + backward · {listing.local_experts:g} local experts × "
                  f"{listing.tokens_per_expert:,.0f} tokens · {train.moe_grouped_gemm_impl.value} GEMMs · "
                  f"{train.moe_dispatcher.value} dispatcher · graphs {graphs}", title_justify="left")
    for column, justify in (("part", "left"), ("GPU ms", "right"), ("amount", "right"), ("host calls", "right"),
                            ("host ms", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for part in listing.parts:
        amount = f"{part.amount / 1e9:,.2f} G{part.unit}" if part.amount else "-"
        table.add_row(part.name, f"{part.gpu_s * MS:,.3f}", amount, f"{part.host_calls:,.0f}",
                      f"{part.host_calls * listing.host_call_s * MS:,.3f}")
    table.add_row("layer", f"{listing.gpu_s * MS:,.3f}", "", "", f"{listing.host_s * MS:,.3f}", style="bold")
    console.print(table)
    wait = "waits on the host for its token counts every forward" if listing.synced else "never waits on the host"
    console.print(f"MoE layer {wait}; host ms of the layer (attention included) after its CUDA graphs, at "
                  f"{listing.host_call_s * 1e6:.1f} us per call (catalog/step.yaml host_call_us)")
