"""The checks `resolve` makes of a run against the cluster's GPU and the model: what each needs that the other may
lack, one SpecError naming the field."""

from __future__ import annotations

from llmscale.errors import SpecError
from llmscale.specs.cluster import ClusterSpec, Fp8AttentionScaling, Generation
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import AttentionKernel, Fp8Recipe, Precision, TrainSpec


def check_precision(cluster: ClusterSpec, train: TrainSpec) -> None:
    """FP8/FP4 need the GPU to have that tensor-core precision (A100 has neither); an MXFP8 recipe needs
    Blackwell's block-scaled tensor cores (Transformer Engine refuses it on Hopper)."""
    gpu = cluster.gpu
    if not gpu.supports(train.precision):
        raise SpecError("precision", train.precision.value,
                        f"gpu {gpu.name} has no {train.precision.value} tensor cores")
    if train.fp8_recipe is not None and train.precision is not Precision.FP8:
        raise SpecError("fp8_recipe", train.fp8_recipe.value,
                        f"a recipe scales FP8 tensors; this run's precision is {train.precision.value} (set "
                        "precision fp8, or leave fp8_recipe out)")
    if train.fp8_recipe is Fp8Recipe.MXFP8 and gpu.efficiency.gemm_mxfp8 is None:
        raise SpecError("fp8_recipe", train.fp8_recipe.value,
                        f"gpu {gpu.name} has no MXFP8 GEMM ceiling (efficiency.gemm_mxfp8; the catalog gives one "
                        "for Blackwell and later); use delayed, tensorwise or blockwise")


def check_pipeline_splits(model: ModelSpec, train: TrainSpec) -> None:
    """A run's own pipeline split places every layer of the model: Megatron refuses a layout whose decoder layers
    do not sum to --num-layers (pipeline_parallel_layer_layout.py validate_layer_layout)."""
    for split in train.pipeline_splits:
        if split.total != model.layers:
            raise SpecError("pipeline_splits", f"pp {split.pp} vpp {split.vpp}: {list(split.layers)}",
                            f"stage layer counts summing to the model's {model.layers} layers (they sum to "
                            f"{split.total})")


def check_attention(cluster: ClusterSpec, train: TrainSpec) -> None:
    """A named attention kernel needs fused attention and a measured curve of it on the GPU."""
    kernel = train.attention_kernel
    if kernel is AttentionKernel.FASTEST:
        return
    if not train.flash_attention:
        raise SpecError("attention_kernel", kernel.value, "names a fused kernel; this run has flash_attention "
                        "false (the unfused core): give one or the other")
    if cluster.gpu.efficiency.attention_curve(kernel) is None:
        raise SpecError("attention_kernel", kernel.value,
                        f"gpu {cluster.gpu.name} has no {kernel.value} curve (efficiency.attention_{kernel.value}: "
                        "the catalog has one for Ampere and Hopper); give the GPU one, or use fastest (Megatron "
                        "--attention-backend fused or auto)")


HOPPER_FP8_ATTENTION_HEAD_DIM = 128
"""The one head dim cuDNN's FP8 attention backward takes on Hopper: cuDNN 9.19.1 on H200 refuses the head-dim-64
graphs ('hidden_dim shoud be equal to 128', NVIDIA/cudnn-frontend@3929da2ef4c1
benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv) and the head-dim-192 ones
(dsv3_20260227_034744.csv); on Blackwell cuDNN 9.22 runs head dims 64, 128 and 192 (the gb200/gb300 tables)."""
TE_BACKENDS = ("NVIDIA/TransformerEngine@v2.18 transformer_engine/pytorch/attention/dot_product_attention/utils.py "
               "get_attention_backend")
"""Where Transformer Engine turns its attention backends off for FP8 (the line numbers below are this file's)."""


def check_fp8_attention(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> None:
    """FP8 attention needs an FP8 run, the fused core (FlashAttention-2 has no FP8 kernel), a recipe Transformer
    Engine scales attention under, what Hopper's fused kernel takes, and a measurement of it on the GPU."""
    if not train.fp8_attention:
        return
    allowed = "precision fp8 (delayed, tensorwise or mxfp8) and fused attention"
    off = "; --bf16-attention runs it in 16-bit"
    if train.precision is not Precision.FP8:
        raise SpecError("fp8_attention", True, f"needs {allowed}; this run's precision is {train.precision.value}{off}")
    if not train.flash_attention or train.attention_kernel is AttentionKernel.FLASH2:
        how = "unfused" if not train.flash_attention else "with FlashAttention-2, which has no FP8 kernel"
        raise SpecError("fp8_attention", True, f"needs {allowed}; this run computes attention {how}{off}")
    gpu = cluster.gpu
    recipe = gpu.fp8_recipe(train)
    if Fp8AttentionScaling.of(recipe) is None:
        raise SpecError("fp8_attention", True, f"needs {allowed}; Transformer Engine disables fused attention under "
                        f"{recipe.value} ({TE_BACKENDS}:639-641, Float8BlockScaling){off}")
    if gpu.generation is Generation.HOPPER:
        _check_hopper_fp8_attention(model, recipe)
    if gpu.efficiency.fp8_attention_ratio(recipe, model.qk_head_dim) is None:
        raise SpecError("fp8_attention", True, f"needs a measurement on the GPU; gpu {gpu.name} has no "
                        f"{recipe.value} FP8 attention measurement (efficiency.fp8_attention){off}")


MCORE_OUTPUT_PROJ = "NVIDIA/Megatron-LM@d98e8a64 megatron/core"
"""Where Megatron-Core builds the MXFP8 output layer (TELMHeadColumnParallelLinear) and checks its settings."""


def check_fp8_output_proj(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> None:
    """The MXFP8 output layer needs an FP8 run under the mxfp8 recipe (transformer_config.py:1569-1575) and a weight
    of its own where it runs. A tied output layer gets the embedding's weight on the stage that holds the embedding
    (gpt_model.py:289: pp = 1, a layout rule, layout.rules Reason.TIED_OUTPUT) and on the stage that runs the MTP
    modules (language_module.py:352-360: every pp), which TELMHeadColumnParallelLinear refuses
    (extensions/transformer_engine.py:1826, :1889)."""
    if not train.fp8_output_proj:
        return
    off = "; --bf16-output-proj keeps the output layer in 16-bit"
    recipe = cluster.gpu.fp8_recipe(train) if train.precision is Precision.FP8 else None
    if recipe is not Fp8Recipe.MXFP8:
        run = f"precision {train.precision.value}" + (f" under {recipe.value}" if recipe is not None else "")
        raise SpecError("fp8_output_proj", True, f"needs precision fp8 under the mxfp8 recipe (--precision fp8 "
                        f"--fp8-recipe mxfp8; {MCORE_OUTPUT_PROJ}/transformer/transformer_config.py:1569-1575); "
                        f"this run is {run}{off}")
    if model.tied_embeddings and model.mtp_layers:
        raise SpecError("fp8_output_proj", True, f"needs an output layer with its own weight beside MTP modules; "
                        f"this job ties it to the input embedding (model {model.name}'s tied_embeddings, or its "
                        f"release's default), which the MTP stage passes to the MXFP8 output layer and it refuses "
                        f"({MCORE_OUTPUT_PROJ}/models/common/language_module/language_module.py:352-360, "
                        f"extensions/transformer_engine.py:1889){off}")


def _check_hopper_fp8_attention(model: ModelSpec, recipe: Fp8Recipe) -> None:
    """Below sm100 Transformer Engine's fused FP8 attention runs under delayed scaling only (current scaling
    :604-607, MXFP8 :621-624), over no sliding window (:1256-1266), and cuDNN's backward at head dim 128 only."""
    if recipe is not Fp8Recipe.DELAYED:
        raise SpecError("fp8_attention", True, f"on Hopper Transformer Engine runs FP8 attention under the delayed "
                        f"recipe only (it disables fused attention for {recipe.value} below sm100, {TE_BACKENDS}"
                        ":604-607); give --fp8-recipe delayed or --bf16-attention")
    if model.sliding_window is not None:
        raise SpecError("fp8_attention", True, "on Hopper Transformer Engine has no FP8 sliding-window attention "
                        f"({TE_BACKENDS}:1256-1266); this model has a {model.sliding_window}-token window")
    dims = {model.qk_head_dim, model.value_head_dim}
    if dims != {HOPPER_FP8_ATTENTION_HEAD_DIM}:
        raise SpecError("fp8_attention", True, f"on Hopper cuDNN's FP8 attention backward takes head dim "
                        f"{HOPPER_FP8_ATTENTION_HEAD_DIM} only; this model's are {sorted(dims)}")
