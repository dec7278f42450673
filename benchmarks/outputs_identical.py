"""Are the predictions of two source trees bit-identical? For a refactor of the cost model or the search.

Writes, for the tree on PYTHONPATH, `validate --json` (both --facts modes), `plan --json` for four jobs and
`explain --json` for six layouts into OUT; with --against DIR, compares OUT with an earlier run's DIR and prints
each file that differs. Only `seconds` (the plan's wall time, which measures the run, not the prediction) is
dropped before comparing.

Run:  PYTHONPATH=/path/to/old/src python benchmarks/outputs_identical.py --out /tmp/old
      PYTHONPATH=src python benchmarks/outputs_identical.py --out /tmp/new --against /tmp/old
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PLANS = {
    "plan_default": [],
    "plan_gpt3_selene": ["-m", "gpt3-175b", "-c", "selene", "--gpus", "1536", "--gbs", "1536"],
    "plan_llama3_70b": ["-m", "llama3-70b", "-c", "eos-h100", "--gpus", "512"],
    "plan_deepseek_v3": ["-m", "deepseek-v3", "-c", "deepseek-v3-h800", "--gpus", "2048"],
}
EXPLAINS = {
    "explain_gpt3_ptdp": ["-m", "gpt3-175b", "-c", "selene", "--gpus", "1536", "--gbs", "1536",
                          "--tp", "8", "--pp", "12", "--mbs", "1", "--vpp", "2", "--recompute", "full"],
    "explain_llama3_405b": ["-m", "llama3-405b", "-c", "llama3-16k", "--gpus", "16384", "--tp", "8", "--pp", "16",
                            "--cp", "1", "--vpp", "4", "--mbs", "1", "--sp"],
    "explain_dsv3": ["-m", "deepseek-v3", "-c", "deepseek-v3-h800", "--gpus", "2048", "--pp", "16", "--ep", "64",
                     "--mbs", "1", "--zero", "1"],
    "explain_qwen3_30b": ["-m", "qwen3-30b-a3b", "-c", "dgx-b200", "--gpus", "8", "--ep", "8", "--mbs", "2",
                          "--precision", "fp8", "--framework", "megatron-bridge"],
    "explain_seed": ["-m", "seed-10t-moe", "-c", "seed-500k", "--gpus", "65536", "--tp", "8", "--pp", "16",
                     "--ep", "64", "--mbs", "1", "--recompute", "selective"],
    "explain_mixtral_zero3": ["-m", "mixtral-8x7b", "-c", "eos-h100", "--gpus", "64", "--ep", "8", "--zero", "3",
                              "--mbs", "2", "--cp", "2"],
}
VALIDATES = {"validate_profile": ["--facts", "profile"], "validate_recipe": ["--facts", "recipe"]}
VOLATILE = ("seconds",)


def _run(command: str, args: list[str]) -> dict:
    argv = [sys.executable, "-c", "from llmscale.cli.main import main; main()", command, *args, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 3) or not done.stdout.strip():
        raise SystemExit(f"{command} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def write_all(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    jobs = [("plan", PLANS), ("explain", EXPLAINS), ("validate", VALIDATES)]
    for command, table in jobs:
        for name, args in table.items():
            text = json.dumps(_strip(_run(command, args)), indent=1, sort_keys=True)
            (out / f"{name}.json").write_text(text)
            print(f"{name}: {len(text):,} bytes")


def compare(out: Path, against: Path) -> int:
    differ = [p.name for p in sorted(against.glob("*.json")) if p.read_bytes() != (out / p.name).read_bytes()]
    for name in differ:
        print(f"DIFFERS: {name}")
    print(f"{len(list(against.glob('*.json'))) - len(differ)} identical, {len(differ)} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    write_all(args.out)
    return compare(args.out, args.against) if args.against else 0


if __name__ == "__main__":
    sys.exit(main())
