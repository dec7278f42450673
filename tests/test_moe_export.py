"""The MoE kernels a run uses (TrainSpec.moe_dispatcher, moe_grouped_gemm_impl, moe_permute_fusion,
moe_router_fusion, cuda_graph_scope) reach Megatron-LM's flags and come back from them; each flag carries its own."""

from __future__ import annotations

import pytest

from llmscale.io.megatron_args import parse_megatron_args
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.document import ExportFormat, export_text
from llmscale.launch.megatron import megatron_args, megatron_notes

KERNELS = ("moe_dispatcher", "moe_grouped_gemm_impl", "moe_permute_fusion", "moe_router_fusion", "cuda_graph_scope")


def _job(framework: str, **train: object) -> Job:
    return resolve(JobRequest(model="qwen3-30b-a3b", cluster="gb200-nvl72", gpus=8,
                              train={"global_batch": 512, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
                                     **train},
                              layout={"ep": 8, "mbs": 1, "cuda_graphs": True}, framework=framework))


def _back(job: Job, drop: str | None = None) -> Job:
    text = export_text(job, ExportFormat.MEGATRON)
    if drop is not None:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(drop))
    return resolve(parse_megatron_args(text).request(cluster=job.cluster))


@pytest.mark.parametrize("framework", ["megatron-bridge@25.11", "megatron-bridge@26.04.01", "megatron-bridge@26.08",
                                       "nemo@25.04"])
def test_moe_kernels_survive_the_round_trip(framework: str) -> None:
    job = _job(framework)
    back = _back(job)
    assert {k: getattr(back.train, k) for k in KERNELS} == {k: getattr(job.train, k) for k in KERNELS}


@pytest.mark.parametrize(("flag", "field"), [("--moe-permute-fusion", "moe_permute_fusion"),
                                              ("--moe-router-fusion", "moe_router_fusion"),
                                              ("--moe-flex-dispatcher-backend", "moe_dispatcher"),
                                              ("--cuda-graph-modules", "cuda_graph_scope"),
                                              ("--moe-grouped-gemm", "moe_grouped_gemm_impl")])
def test_each_kernel_flag_carries_its_field(flag: str, field: str) -> None:
    # 25.11 on GB200: HybridEP, fused permute and router, TE grouped GEMMs, graphs of the router and preprocess
    job = _job("megatron-bridge@25.11")
    assert getattr(_back(job, drop=flag).train, field) != getattr(job.train, field)


def test_the_fused_grouped_mlp_is_the_op_fuser_and_an_environment_note() -> None:
    job = _job("megatron-bridge@26.08")  # full-iteration MXFP8 recipe on GB200 (catalog 26.08 rules)
    assert job.train.moe_grouped_gemm_impl.value == "te-fused" and job.train.cuda_graph_scope.value == "iteration"
    args = megatron_args(job)
    assert "--use-transformer-engine-op-fuser" in args and args[args.index("--cuda-graph-impl") + 1] == "full_iteration"
    assert any("NVTE_CUTEDSL_FUSED_GROUPED_MLP" in note for note in megatron_notes(job))
