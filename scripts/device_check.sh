#!/usr/bin/env bash
# One prepared check of llmscale on a GPU machine, in at most ~8 minutes, every result under $OUT:
#   env.txt                  nvidia-smi, torch and CUDA versions, GPU count
#   bench_gemm.json          llmscale bench gemm on the GPU (llama3-8b's GEMM shapes, bf16)
#   bench_memory.json        llmscale bench memory on the GPU (device copy bandwidth)
#   bench_collectives.json   llmscale bench collectives over every local GPU on NCCL
#   probe.json               llmscale probe (the real-training check; CPU ranks on this host)
#   run/                     the runtime example GPT on NCCL, one rank SIGKILLed in a storage save (LLMSCALE_CHAOS)
#   journal.json             llmscale journal of that run: the fault, the restart, the restore
#   profile.json             llmscale profile of that run (measured step parts beside the prediction)
#   summary.tsv              one line per step: name, exit code, seconds, limit
# Each step runs under its own time limit and a failing step does not stop the others; the exit code is the
# number of failed steps. Usage:
#   OUT=/path/to/out scripts/device_check.sh            # on the GPU machine (from the repository root)
#   scripts/device_check.sh --dry-run                   # print the plan (and write it to $OUT/plan.txt)
#   DEVICE=cpu scripts/device_check.sh                  # the same steps on CPU/gloo (slow; checks the commands)
# Needs llmscale installed with the measure extra (pip install -e ".[measure]": torch==2.13.0).
set -uo pipefail

DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
    DRY_RUN=1
elif [ $# -gt 0 ]; then
    echo "usage: [OUT=DIR] [DEVICE=cuda|cpu] $0 [--dry-run]" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/device-check-out}"
mkdir -p "$OUT"
LLMSCALE="${LLMSCALE:-llmscale}"

if [ -z "${DEVICE:-}" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then DEVICE=cuda; else DEVICE=cpu; fi
fi
if [ "$DEVICE" = cuda ]; then
    NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    NGPU="${NGPU:-1}"
    [ "$NGPU" -ge 1 ] || NGPU=1
    BACKEND=nccl
    RANKS="$NGPU"             # one rank per GPU: NCCL refuses two ranks on one device
else
    NGPU=0
    BACKEND=gloo
    RANKS=2
fi

# The example GPT, sized to the ranks: storage saves every 10 steps, rank 0 SIGKILLed entering the save of step 20
# in the first attempt (runtime/chaos.py), so the run restarts once and resumes from step 10's checkpoint.
RUN_CONFIG="$OUT/run.yaml"
CHAOS="save_start:20:0:0"
EXAMPLE_SCRIPT="$(python -c 'import llmscale.runtime.example as e, pathlib; print(pathlib.Path(e.__file__).parent / "train.py")' 2>/dev/null || echo "$ROOT/src/llmscale/runtime/example/train.py")"

write_run_config() {
    cat > "$RUN_CONFIG" <<EOF
# scripts/device_check.sh: the runtime example on $BACKEND, $RANKS rank(s)
name: device-check
model: {n_layer: 4, n_head: 6, d_model: 192, seq_len: 64}
layout: {dp: $RANKS}
nproc_per_node: $RANKS
precision: fp32
batch: {micro_batch_size: 8, global_batch_size: $((8 * RANKS))}
schedule: {warmup_steps: 5, total_steps: 40}
seed: 1234
checkpoint: {memory_every_steps: 5, storage_every_steps: 10, keep: 2, save_timeout_s: 120}
restart: {max_attempts: 4, max_attempts_without_progress: 2, heartbeat_timeout_s: 60}
EOF
}

FAILED=0
printf 'step\texit\tseconds\tlimit_s\n' > "$OUT/summary.tsv"
: > "$OUT/plan.txt"

# step NAME LIMIT_S OUTFILE CMD...: run CMD under `timeout LIMIT_S`, stdout to $OUT/OUTFILE, stderr to NAME.log.
step() {
    local name="$1" limit="$2" outfile="$3"
    shift 3
    printf '%s (≤ %ss): %s > %s\n' "$name" "$limit" "$*" "$OUT/$outfile" >> "$OUT/plan.txt"
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s\t-\t-\t%s\n' "$name" "$limit" >> "$OUT/summary.tsv"
        return 0
    fi
    local start end code
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$outfile" 2> "$OUT/$name.log"
    code=$?
    end=$(date +%s)
    printf '%s\t%s\t%s\t%s\n' "$name" "$code" "$((end - start))" "$limit" >> "$OUT/summary.tsv"
    if [ "$code" -ne 0 ]; then
        FAILED=$((FAILED + 1))
        echo "device_check: $name exited $code (log: $OUT/$name.log)" >&2
    fi
    return 0
}

environment() {
    echo "date $(date -u +%FT%TZ) · host $(hostname) · device $DEVICE · backend $BACKEND · ranks $RANKS"
    nvidia-smi 2>&1 || echo "no nvidia-smi"
    python -c 'import torch, llmscale; print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
torch.cuda.is_available(), "devices", torch.cuda.device_count(), "llmscale", llmscale.__version__)'
    uptime
}

DEV_FLAG=()
if [ "$DEVICE" = cuda ]; then DEV_FLAG=(--device cuda); else DEV_FLAG=(--device cpu); fi
GEMM_FLAGS=(-m llama3-8b --tp 8 --mbs 1 --seq-len 4096)
[ "$DEVICE" = cuda ] && GEMM_FLAGS+=(--dtype bfloat16)
[ "$DEVICE" = cpu ] && GEMM_FLAGS=(-m llama3-8b --tp 8 --mbs 1 --seq-len 256)

export -f environment
export DEVICE BACKEND RANKS
step env 10 env.txt bash -c environment
step bench_gemm 60 bench_gemm.json "$LLMSCALE" bench gemm "${GEMM_FLAGS[@]}" "${DEV_FLAG[@]}" --json
step bench_memory 30 bench_memory.json "$LLMSCALE" bench memory "${DEV_FLAG[@]}" --json
step bench_collectives 60 bench_collectives.json "$LLMSCALE" bench collectives --nproc "$RANKS" \
    --backend "$BACKEND" --json
step probe 90 probe.json "$LLMSCALE" probe --json
if [ "$DRY_RUN" = 0 ]; then
    write_run_config
    rm -rf "$OUT/run"
fi
step launch_with_kill 150 launch.txt env LLMSCALE_CHAOS="$CHAOS" "$LLMSCALE" launch "$RUN_CONFIG" \
    --run-dir "$OUT/run" -- "$EXAMPLE_SCRIPT"
step journal 10 journal.json "$LLMSCALE" journal "$OUT/run" --json
step profile 60 profile.json "$LLMSCALE" profile "$OUT/run" --json

if [ "$DRY_RUN" = 1 ]; then
    cat "$OUT/plan.txt"
    total=$(awk -F'\t' 'NR > 1 { s += $4 } END { print s }' "$OUT/summary.tsv")
    echo "dry run: $(($(wc -l < "$OUT/plan.txt"))) steps, at most $total s in all; nothing was run"
    exit 0
fi
cat "$OUT/summary.tsv"
echo "device_check: $FAILED step(s) failed; results in $OUT"
exit "$FAILED"
