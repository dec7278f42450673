"""TrainSpec: what is trained — sequence length, batch, tokens, precision, optimizer."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.bounds import (
    MAX_GLOBAL_BATCH,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_TOKENS,
)


class Precision(str, Enum):
    """GEMM precision of the training recipe."""

    BF16 = "bf16"
    """BF16 mixed precision (bf16 weights and activations, fp32 master and optimizer)."""
    FP16 = "fp16"
    """FP16 mixed precision with loss scaling; same memory and peak as bf16."""
    FP8 = "fp8"
    """FP8 GEMMs (Transformer Engine); bf16 weights kept, fp8 weight copies added."""
    FP4 = "fp4"
    """FP4 (NVFP4/MXFP4) GEMMs on Blackwell; bf16 weights kept, fp4 copies added."""


class Optimizer(str, Enum):
    """Optimizer, which sets the state kept per parameter."""

    ADAM = "adam"
    """Adam/AdamW: two fp32 moments (8 B per parameter)."""
    SGD_MOMENTUM = "sgd"
    """SGD with momentum: one fp32 buffer (4 B per parameter)."""


class PipelineSplit(Spec):
    """The transformer layers of every pipeline stage for the layouts of one pp × vpp, as Megatron's
    --pipeline-model-parallel-layout places them (NVIDIA/Megatron-LM@00caa53
    megatron/core/transformer/pipeline_parallel_layer_layout.py: stage k runs on pipeline rank k mod pp). The
    embedding sits on the first stage and the output layer, the loss and any MTP modules on the last, as in every
    layout llmscale prices; a stage may hold no layer (Megatron-Bridge's DeepSeek-V3 H100 layout 'Et|(tt|)*30mL'
    ends with one holding only MTP and the loss)."""

    pp: int = Field(ge=2, le=MAX_LAYERS, description="pipeline ranks of the layouts it splits")
    vpp: int = Field(1, ge=1, le=MAX_LAYERS, description="stages (chunks) per rank of the layouts it splits")
    layers: tuple[int, ...] = Field(description="transformer layers of stage 0, 1, …, pp·vpp − 1")

    @model_validator(mode="after")
    def _stages(self) -> PipelineSplit:
        if len(self.layers) != self.pp * self.vpp:
            raise FieldProblem("layers", list(self.layers), f"{self.pp * self.vpp} stage counts (pp {self.pp} × "
                               f"vpp {self.vpp}), one per stage")
        if any(n < 0 or n > MAX_LAYERS for n in self.layers):
            raise FieldProblem("layers", list(self.layers), f"whole numbers 0 to {MAX_LAYERS}")
        return self

    @property
    def total(self) -> int:
        """Transformer layers over all stages (the model's layer count, for the split to apply)."""
        return sum(self.layers)


def split_for(splits: tuple[PipelineSplit, ...], pp: int, vpp: int) -> PipelineSplit | None:
    """The one of `splits` for layouts of this pp and vpp (None: none is)."""
    return next((s for s in splits if (s.pp, s.vpp) == (pp, vpp)), None)


class Fp8Cache(str, Enum):
    """Which saved activations an FP8 recipe keeps in FP8 (only read when precision is fp8)."""

    LINEAR_INPUTS = "linear-inputs"
    """Transformer Engine: each Linear keeps the FP8 copy of its input for the weight-gradient GEMM; everything
    else stays 16-bit, so the attention output is kept twice (16-bit for attention's backward, FP8 for the output
    projection's: NVIDIA/Megatron-LM@79e8592b docs/discussions/deepseek-v3-gb200-optimization, "1.5 times")."""
    FINE_GRAINED = "fine-grained"
    """DeepSeek-V3 §3.3.3: also the experts' SwiGLU inputs in FP8 (their outputs recomputed), and the attention
    output once, in E5M6 (1.5 B), shared by attention's backward and the projection's."""


class Fp8Recipe(str, Enum):
    """How an FP8 run scales its tensors (Megatron-Core `--fp8-recipe`, megatron/core/enums.py Fp8Recipe
    @d98e8a64; Transformer Engine's recipes). It sets what quantizing a GEMM input costs (cost.compute) and, for
    MXFP8, the GEMM kernels' rate (EfficiencySpec.gemm_mxfp8)."""

    DELAYED = "delayed"
    """One scale per tensor from an amax history: the amax is taken inside the cast kernel (one read)."""
    TENSORWISE = "tensorwise"
    """Per-tensor current scaling: one pass for the amax, a second to scale and cast (TE docs, FP8 current scaling,
    Figure 4: "two tensor reads are needed")."""
    MXFP8 = "mxfp8"
    """Blackwell's block scaling, an E8M0 scale per 32 elements; row- and column-wise copies are quantized
    separately because their blocks differ."""
    BLOCKWISE = "blockwise"
    """1×128 activation and 128×128 weight blocks with fp32 scales (DeepSeek-V3 §3.3.2), native on Hopper;
    Transformer Engine runs it as MXFP8 on Blackwell."""


class Zero3Gather(str, Enum):
    """What a ZeRO-3 implementation gathers at once (only read when zero = 3)."""

    LAYER = "layer"
    """FSDP units are the transformer layers (Megatron-FSDP's default fsdp_unit_modules = [TransformerLayer],
    NVIDIA/Megatron-LM@d95e86a25bce megatron/core/distributed/fsdp/mcore_fsdp_adapter.py): the layer being computed
    and the one prefetched, the unsharded gradients of the layer being reduced, and the parameters outside the
    layers (embedding, output layer, final norm), which are gathered at their forward and not released before the
    step's buckets are reset (megatron_fsdp.py `_post_forward` releases FSDP units only, `_root_pre_backward` marks
    only FSDP-unit buckets releasable)."""
    MODULE = "module"
    """DeepSpeed ZeRO-3 (microsoft/DeepSpeed@112ebff6e86a, 2021-04-08, deepspeed/runtime/zero/stage3.py): each
    sub-module's own parameters (`named_parameters(recurse=False)`, one Linear) are gathered before its forward or
    backward and released after it; nothing is prefetched while the live parameters exceed
    stage3_max_live_parameters (default 1e9), and a parameter larger than reduce_bucket_size (5e8) has its full
    16-bit gradient reduce-scattered at once: one weight matrix and its gradient are unsharded at a time."""


class AttentionKernel(str, Enum):
    """Which fused attention kernel computes the attention core (read when flash_attention is true)."""

    FASTEST = "fastest"
    """The fastest fused kernel the catalog measured on the GPU, chunk length by chunk length: cuDNN's
    (EfficiencySpec.attention*, which Transformer Engine runs) on Hopper and Blackwell, or FlashAttention-2's where
    its curve is faster (Hopper backward below ~900 tokens); FlashAttention-2 on Ampere."""
    FLASH2 = "flash2"
    """FlashAttention-2 (Dao 2023, arXiv:2307.08691), the kernel of PyTorch SDPA's flash backend and of stacks that
    call flash_attn 2 directly; on Hopper about half cuDNN's rate (FlashAttention-3, arXiv:2407.08608 §4.1)."""


class Routing(str, Enum):
    """How an MoE router balances its experts (it sets the load of the busiest expert-parallel rank)."""

    FORCED = "forced"
    """Router logits replaced by random noise, every token to k uniformly random experts (Megatron
    --moe-router-force-load-balancing; the Megatron-Bridge benchmark tables run so): only sampling imbalance."""
    LOSS_FREE = "loss-free"
    """Auxiliary-loss-free balancing by per-expert bias (DeepSeek-V3 §2.1.2; arXiv:2408.15664)."""
    AUX_LOSS = "aux-loss"
    """An auxiliary balance loss (Megatron's default moe_router_load_balancing_type aux_loss)."""


class MoeDispatcher(str, Enum):
    """How an MoE layer moves its tokens to the experts' ranks (Megatron-Core moe_token_dispatcher_type and
    moe_flex_dispatcher_backend, megatron/core/transformer/moe/token_dispatcher.py @ core_v0.15.0)."""

    ALLTOALL = "alltoall"
    """MoEAlltoAllTokenDispatcher: token counts gathered over the EP group, split sizes copied to the host, NCCL
    all_to_all_single for tokens and for their probabilities, permute and chunk sort around it."""
    ALLGATHER = "allgather"
    """MoEAllGatherTokenDispatcher: every rank gathers all tokens and keeps its experts' (Megatron's default)."""
    FLEX_DEEPEP = "flex-deepep"
    """MoEFlexTokenDispatcher over DeepEP's fused dispatch and combine kernels."""
    FLEX_HYBRIDEP = "flex-hybridep"
    """MoEFlexTokenDispatcher over HybridEP's fused dispatch and combine kernels (NVLink domain and RDMA)."""


class GroupedGemm(str, Enum):
    """Which kernels run a rank's local experts (Megatron-Core experts.py; Transformer Engine GroupedLinear)."""

    TE = "te"
    """TEGroupedMLP over TE GroupedLinear: one cuBLASLt GEMM per local expert, round-robin over 4 streams
    (TE v2.9 common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm; util/multi_stream.cpp: 4 compute streams), each
    expert's input quantized by its own kernel (pytorch/csrc/extensions/cast.cpp split_quantize); the per-expert
    token counts must be on the host (m_splits)."""
    TE_FUSED = "te-fused"
    """TE's op fuser with the CuTe-DSL fused grouped MLP (NVTE_CUTEDSL_FUSED_GROUPED_MLP): FC1, GLU, quantization
    and FC2 as grouped kernels reading the counts on the device (sync-free; NVIDIA technical blog 'Boosting MoE
    Training Throughput with Advanced Fusion Kernels', 2026-06-15)."""
    LEGACY = "legacy"
    """One grouped GEMM kernel per linear over all local experts: Megatron's GroupedMLP over nv-grouped-gemm (CUTLASS,
    16-bit), torchtitan's torch._grouped_mm; the dispatch still needs the sizes on the host."""
    CUBLAS_LOOP = "cublas-loop"
    """SequentialMLP: a Python loop over the local experts, each a GEMM, activation and GEMM on one stream."""


class CudaGraphScope(str, Enum):
    """What a layout with cuda_graphs captures (Megatron-Core --cuda-graph-impl and --cuda-graph-modules,
    megatron/core/transformer/enums.py CudaGraphModule @ d98e8a64). A graph cannot hold a host synchronisation: the
    part of an MoE layer after its token counts reach the host stays eager under every per-layer scope."""

    LAYER = "layer"
    """Whole layers (per-layer graphs with no module list: Megatron's 'local', or TE's full scope)."""
    ATTN = "attn"
    """The attention part of each layer (TransformerLayer._forward_attention)."""
    MOE_ROUTER = "moe-router"
    """The MoE router and the dispatcher's preprocess (moe_router, moe_preprocess)."""
    ATTN_MOE_ROUTER = "attn-moe-router"
    """Both: from the start of each layer to the dispatcher's preprocess."""
    ITERATION = "iteration"
    """One graph for the whole forward and backward (cuda_graph_impl full_iteration)."""


TRAIN_FLAGS = {"total_tokens": "--tokens", "global_batch": "--gbs", "seq_len": "--seq-len", "precision": "--precision",
               "flash_attention": "--flash-attention", "bf16_moments": "--bf16-moments", "fp8_cache": "--fp8-cache",
               "routing": "--routing", "fp8_dispatch": "--fp8-dispatch",
               "fp8_recipe": "--fp8-recipe", "attention_kernel": "--attention-kernel",
               "fp8_attention": "--fp8-attention", "fp8_output_proj": "--fp8-output-proj"}
"""The command-line flag of each TrainSpec field the commands take (the CLI declares its options with these)."""


class TrainSpec(Spec):
    """The training run."""

    seq_len: PositiveInt = Field(4096, le=MAX_POSITIONS, description="tokens per sequence")
    global_batch: PositiveInt = Field(
        8192, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step (8192 × 4096 = 33.6M tokens)"
    )
    total_tokens: PositiveFloat = Field(10e12, le=MAX_TOKENS, description="tokens the run trains on")
    precision: Precision = Precision.BF16
    optimizer: Optimizer = Optimizer.ADAM
    fp32_master_weights: bool = Field(True, description="keep an fp32 copy of the weights (4 B/param)")
    fp32_grads: bool = Field(
        True, description="accumulate gradients in fp32 (Megatron main_grad, 4 B/param); False = bf16 (2 B)"
    )
    flash_attention: bool = Field(True, description="fused attention: no s×s score matrix is stored")
    attention_kernel: AttentionKernel = Field(
        AttentionKernel.FASTEST, description="which fused attention kernel runs (with flash_attention only)")
    fp8_attention: bool = Field(
        False, description="the fused attention core in FP8 under the run's FP8 recipe (Megatron-Bridge "
        "mixed_precision.fp8_dot_product_attention, Transformer Engine fp8_dpa): Q, K, V and the gradients in FP8, "
        "priced at cuDNN's measured FP8-over-16-bit time (EfficiencySpec.fp8_attention); with precision fp8 and "
        "flash_attention only")
    fp8_output_proj: bool = Field(
        False, description="the output layer's logits GEMMs in MXFP8 (Megatron-Core TransformerConfig.fp8_output_proj, "
        "TELMHeadColumnParallelLinear) instead of 16-bit; with precision fp8 under the mxfp8 recipe and an output "
        "layer not tied to the input embedding only")
    bf16_moments: bool = Field(
        False, description="Adam moments in bf16, 2 B each (DeepSeek-V3 §3.3.3; Megatron "
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)")
    fp8_cache: Fp8Cache = Field(Fp8Cache.LINEAR_INPUTS, description="saved activations kept in FP8 by an FP8 recipe")
    fp8_recipe: Fp8Recipe | None = Field(
        None, description="how FP8 tensors are scaled; None: the GPU's native recipe (`fp8_recipe_on`)")
    zero3_gather: Zero3Gather = Field(Zero3Gather.LAYER, description="what ZeRO-3 gathers at once")
    zero3_synchronous: bool = Field(
        False, description="ZeRO-3 as DeepSpeed ran it in 2021 (microsoft/DeepSpeed@112ebff6e86a): one collective "
        "per parameter tensor (partition_parameters.py _all_gather, _reduce_scatter_gradients loop over the "
        "parameters), the device synchronized before each all-gather (_allgather_param: torch.cuda.synchronize()) "
        "and after each sub-module's (stage3.py _synchronize_communication), so no ZeRO-3 collective overlaps compute; "
        "only read when zero = 3")
    fsdp_double_buffer: bool = Field(
        False, description="Megatron-FSDP fsdp_double_buffer: persistent pools of two layers' unsharded weights and "
        "two layers' unsharded gradients (param_and_grad_buffer.py FixedPoolAllocator 'fsdp_params', 'fsdp_grads', "
        "UB_BUFFER_NUM = 2); without it one layer's gradients")
    fp8_params: bool = Field(
        False, description="FP8 primary weights (Megatron --fp8-param-gather): under ZeRO-3 the layers' GEMM weights "
        "are sharded and gathered in FP8, 1 B, their transpose dropped after each use (keep_fp8_transpose_cache off)")
    fused_cross_entropy: bool = Field(
        False, description="Transformer Engine's fused cross-entropy (Megatron cross_entropy_fusion_impl 'te'): the "
        "16-bit logits are kept and overwritten by their gradient in place, no fp32 copy")
    routing: Routing = Field(Routing.AUX_LOSS, description="how an MoE router balances its experts")
    fp8_dispatch: bool = Field(False, description="MoE tokens dispatched in FP8 with block scales, combined in 16-bit "
                               "(DeepSeek-V3 §3.3.3; DeepEP)")
    moe_dispatcher: MoeDispatcher = Field(MoeDispatcher.ALLTOALL, description="how an MoE layer moves its tokens")
    moe_grouped_gemm_impl: GroupedGemm = Field(GroupedGemm.TE, description="which kernels run the local experts")
    moe_permute_fusion: bool = Field(True, description="fused token permute and unpermute (Megatron "
                                     "--moe-permute-fusion: TE's moe_permute kernels)")
    moe_router_fusion: bool = Field(True, description="fused router score and top-k (Megatron --moe-router-fusion)")
    cuda_graph_scope: CudaGraphScope = Field(CudaGraphScope.LAYER, description="what a layout with cuda_graphs "
                                             "captures (read only where cuda_graphs is on)")
    pipeline_splits: tuple[PipelineSplit, ...] = Field(
        (), description="layers per pipeline stage for the layouts of a given pp and vpp (Megatron "
        "--pipeline-model-parallel-layout); layouts of any other pp × vpp take llmscale's balanced split")

    @model_validator(mode="after")
    def _one_split_each(self) -> TrainSpec:
        shapes = [(s.pp, s.vpp) for s in self.pipeline_splits]
        repeated = sorted({shape for shape in shapes if shapes.count(shape) > 1})
        if repeated:
            raise FieldProblem("pipeline_splits", [f"pp {pp} vpp {vpp}" for pp, vpp in repeated],
                               "one split per pp and vpp")
        return self

    def pipeline_split(self, pp: int, vpp: int) -> PipelineSplit | None:
        """The split given for layouts of this pp and vpp (None: llmscale's)."""
        return split_for(self.pipeline_splits, pp, vpp)

    def fp8_recipe_on(self, has_mxfp8: bool) -> Fp8Recipe:
        """The recipe this run's FP8 GEMMs use on a GPU with (`has_mxfp8`) or without MXFP8 tensor cores: the one
        given, else the native one — MXFP8 on Blackwell, per-tensor current scaling before it (what `export` writes
        for a run that names none)."""
        if self.fp8_recipe is not None:
            return self.fp8_recipe
        return Fp8Recipe.MXFP8 if has_mxfp8 else Fp8Recipe.TENSORWISE

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch
