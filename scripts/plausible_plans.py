"""The recommended layout of default plans on every catalog GPU generation beside the best published MFU of that
generation: how far above the record each lands and, where it does, what the plan names as the feature the record
run lacked (search.plausibility, validation.record).

Run:  python scripts/plausible_plans.py [--framework NAME[@RELEASE]] [--precision bf16|fp8]
Prints one row per model × cluster: top-layout MFU, the record, the margin in points, and the note.
"""

from __future__ import annotations

import argparse

from llmscale.api.jobs import plan
from llmscale.io.catalog import load_cluster

CLUSTERS = ("selene", "eos-h100", "dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72")
"""One catalog cluster per GPU generation (Ampere, Hopper, Blackwell HGX and NVL72, Blackwell Ultra both)."""
MODELS = (("gpt3-175b", 1024), ("llama3-70b", 512), ("llama3-405b", 2048))
"""Dense catalog models and a job size each (a plan on the whole cluster picks its own)."""
MARGIN = 0.03
"""Points above the generation's best published MFU a plan may land without naming what earns the rest."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default=None)
    parser.add_argument("--precision", default="bf16")
    args = parser.parse_args()
    print(f"{'model':<13}{'cluster':<13}{'GPUs':>6}{'MFU':>7}{'record':>8}{'points':>8}  named")
    within = named = 0
    rows = 0
    for model, gpus in MODELS:
        for cluster in CLUSTERS:
            size = min(gpus, load_cluster(cluster).num_gpus)
            result = plan(model, cluster, gpus=size, train={"precision": args.precision}, framework=args.framework,
                          top=1)
            top = result.document["top"][0]
            excess = top["above_published_mfu"]
            record = excess["best_published_mfu"] if excess else None
            points = (top["mfu"] - record) * 100 if record is not None else 0.0
            rows += 1
            within += points <= MARGIN * 100
            has_features = bool(excess) and all(t["feature"] for t in excess["terms"])
            named += bool(excess) and points > MARGIN * 100 and has_features
            note = "; ".join(f"{t['term']}: {t['feature']}" for t in excess["terms"]) if excess else ""
            print(f"{model:<13}{cluster:<13}{size:>6}{top['mfu']:>7.1%}"
                  f"{(f'{record:.1%}' if record is not None else '-'):>8}{points:>+8.1f}  {note[:150]}")
    print(f"\n{within} of {rows} within the record + {MARGIN:.0%}; {named} above it name what earns the rest")


if __name__ == "__main__":
    main()
