"""The allowed ranges of the input fields, each with its reason: one place for the numbers a spec field, a layout
field and a CLI flag share (`ClusterSpec.num_gpus`, `Layout.tp` and `--gpus` all stop at `MAX_GPUS`).

Every bound sits far beyond today's largest published run or shipped catalog entry (tests/test_catalog.py and
`llmscale validate` load them all) and well inside what the array code can hold: products of a few bounded
counts stay below 2⁶³ in int64 (layout.arrays, cost.memory), and a per-layer list is never longer than
`MAX_LAYERS`. A value past a bound is refused at the boundary with the usual one line
(`field = value is invalid: …`), never clipped. Every float of every spec is also finite (`specs.base.Spec`:
`allow_inf_nan=False`).
"""

from __future__ import annotations

MAX_LAYERS = 10_000
"""Transformer layers: the deepest published LLMs have ~10² (Llama 3 405B: 126); 10⁴ leaves two orders."""
MAX_HIDDEN = 1_000_000
"""Hidden, FFN, head and rank sizes: the widest published FFN is ~10⁵ (Megatron 1T: 102400)."""
MAX_HEADS = 100_000
"""Attention heads: published models have ≤ 10³ (GPT-3 / Megatron 1T: 96–160)."""
MAX_VOCAB = 10_000_000
"""Vocabulary: published tokenizers have ≤ ~3·10⁵ entries (Gemma: 256000)."""
MAX_EXPERTS = 100_000
"""Routed or shared experts per layer, and top-k: published MoEs have ≤ ~10³ (DeepSeek-V3: 256)."""
MAX_POSITIONS = 100_000_000
"""Sequence length and position tables (tokens): published contexts reach ~10⁷ (Llama 4 Scout: 10M)."""
MAX_RATIO = 1_000.0
"""Dimensionless factors with no natural ceiling (capacity factor, RoPE scaling factor, oversubscription): the
published values are ≤ 10² (YaRN factor 40, DeepSeek-V3)."""
MAX_ROPE_THETA = 1e12
"""RoPE base θ: published bases are ≤ ~10⁷ (Llama 4: 5·10⁵, Qwen: 10⁶)."""

MAX_GPUS = 100_000_000
"""GPUs of a cluster, a job or one parallel dimension: the largest clusters have ~10⁵–10⁶ accelerators. Products of
four such sizes can exceed 2⁶³, so the layout rules multiply in Python integers (layout.constraints)."""
MAX_NODE_GPUS = 10_000
"""GPUs or NICs per node: today's servers hold ≤ 72 (a GB200 NVL72 rack counted as one node)."""
MAX_TIER_RANKS = 1_000_000_000
"""GPUs in one network-tier domain: the outermost tier may span more than the job (≤ 10× MAX_GPUS)."""
MAX_SMS = 100_000
"""Streaming multiprocessors per GPU: ≤ 200 today (B200: 148)."""

MIN_GB_PER_S = 1e-3
"""Bandwidths in GB/s: 10⁶ B/s, below any link that could carry a training job's traffic (10 Mbit Ethernet)."""
MAX_GB_PER_S = 1e6
"""Bandwidths in GB/s: 10¹⁵ B/s, ~100× the fastest HBM (B200: 8 TB/s) or an aggregate parallel file system."""
MIN_GBIT_PER_S = 8e-3
"""NIC line rate in Gbit/s: 10⁶ B/s (MIN_GB_PER_S in bits)."""
MAX_GBIT_PER_S = 8e6
"""NIC line rate in Gbit/s: 10¹⁵ B/s (MAX_GB_PER_S in bits); today's NICs run at 800 Gbit/s."""
MAX_LATENCY_US = 1e6
"""A hop's latency in µs: 1 s, far beyond any network (µs inside a node, tens of µs across a data centre)."""
MAX_MEMORY_GIB = 100_000.0
"""Device or host memory per GPU or node in GiB: today's largest GPUs hold ~300 GiB, hosts a few TiB."""
MAX_TFLOPS = 1_000_000.0
"""Dense peak in TFLOP/s: ~70× the fastest datasheet peak today (B300 FP4: 15 PFLOP/s)."""
MIN_PUE, MAX_PUE = 1.0, 3.0
"""Power usage effectiveness: 1 by definition at least; 3 is worse than any data centre surveyed (Uptime 2023: ~1.6)."""
MAX_POWER_W = 1e6
"""Power per GPU or node overhead in W: a GPU draws ≤ ~1.4 kW today, a whole rack ~10⁵ W."""
MAX_USD_PER_GPU_HOUR = 10_000.0
"""Price in USD per GPU-hour: cloud list prices are ≤ ~$10."""
MAX_PLANES = 64
"""Independent network planes: multi-plane fabrics use ≤ 8 (DeepSeek-V3's cluster: 8)."""

MAX_GLOBAL_BATCH = 1_000_000_000
"""Sequences per optimizer step: published runs use ≤ ~10⁴ (Megatron 1T: 3072; PaLM: 2048)."""
MAX_TOKENS = 1e16
"""Tokens a run trains on: the largest published runs are ~3·10¹³ (Llama 4: 30T)."""
MAX_DAYS = 10_000.0
"""Wall-clock days of a run or a deadline: ~27 years, beyond any hardware's service life."""
MIN_DAYS = 1e-3
"""Wall-clock days of a run or a deadline, at least: 1.44 minutes, shorter than any training run (1e-300 is a slip)."""
MAX_PER_YEAR = 1e6
"""Interruptions per unit-year of one cause: one every ~30 s of a GPU's life; published rates are ≤ ~10²."""
MAX_SECONDS = 1e7
"""A fixed time (restart, detection, pause) in s: ~4 months."""

MAX_MBS = 1_000_000
"""Micro-batch size in sequences: published runs use ≤ 16."""
MAX_VPP = 10_000
"""Virtual pipeline stages per rank: at most one per layer (MAX_LAYERS)."""
