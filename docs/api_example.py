"""The notebook-style example of docs/api.md: plan, a table of the top layouts, explain, goodput, validate, export."""

import llmscale

# 1. Search: Llama 3 70B on 512 H100s of the eos-h100 cluster, 15T tokens, Megatron-Core, TP fixed at 8.
plan = llmscale.plan("llama3-70b", "eos-h100", gpus=512, train={"total_tokens": 15e12},
                     rules={"tp": 8, "pp": "2..8"}, framework="megatron-core", top=5)
best = plan.best
print(best.layout.tp, best.layout.pp, best.layout.dp, best.layout.resolved_schedule.value)
print(f"MFU {best.mfu:.1%}, {best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {best.days:.1f} days, "
      f"{best.memory_fraction:.0%} of HBM, runs on {', '.join(best.frameworks)}")

# 2. The top layouts as a table (pandas: pip install 'llmscale[frame]').
frame = plan.to_frame()
print(frame[["layout.pp", "layout.vpp", "layout.mbs", "layout.zero", "layout.recompute", "mfu",
             "tokens_per_s_per_gpu", "memory_fraction"]].to_string(index=False))

# 3. One layout, explained; its step breakdown as a table.
step = llmscale.explain("llama3-70b", "eos-h100", layout=best.layout, gpus=512, train={"total_tokens": 15e12,
                        "global_batch": plan.to_dict()["global_batch"]["sequences"]})
print(f"step {step.step_time_s:.2f} s, fits: {step.fits}")
print(step.to_frame().round(3).to_string(index=False))

# 4. Failures and checkpoints of that job size, and the record.
gp = llmscale.goodput("eos-h100", 512, "llama3-70b", days=30, intervals_min=[5, 10, 30], trials=1000)
print(f"goodput {gp['goodput']:.3f}, best policy {gp['best_policy']}, job MTBF {gp['job_mtbf_hours']:.0f} h")
val = llmscale.validate()
print(val["summary"]["median_abs_error_pct"], "% median |error| over", len(val["rows"]), "published runs")

# 5. The roomier runner-up, if one is within a few percent.
if plan.roomier:
    print(f"roomier: pp{plan.roomier.layout.pp} mbs{plan.roomier.layout.mbs} uses {plan.roomier.memory_fraction:.0%}"
          f" at {plan.roomier.tokens_per_s_per_gpu / best.tokens_per_s_per_gpu - 1:+.1%}")

# 6. Launch it: the best layout as Megatron-LM flags (or fmt="torchtitan" for a recipe module).
flags = llmscale.export("llama3-70b", "eos-h100", layout=best.layout, gpus=512,
                        train={"global_batch": plan.to_dict()["global_batch"]["sequences"]}, fmt="megatron")
print("\n".join(line for line in flags.splitlines() if "parallel" in line or "rotary" in line))
