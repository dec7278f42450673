"""`llmscale probe`: train a real transformer for a few steps on this machine's CPU (torch.distributed, gloo) and
compare the measured step — compute, communication, idle — with llmscale's prediction (measure/probe.py).

torch is imported only inside the command, after `require_torch()`: without it the command is one line and exit
code 2. Output: an nccl-tests-style table (a `#` preamble, header and units rows, measured / predicted / error
columns, an OK/FAILED footer against --tolerance-pct) or, with --json, the whole document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.errors import InputFileError
from llmscale.report.strict_json import strict_dumps

DEFAULT_PROBE_MODEL = "probe-dense"
ROWS = (("step", "step_s"), ("compute", "compute_s"), ("  forward", "forward_s"), ("  backward", "backward_s"),
        ("  optimizer", "optimizer_s"), ("comm", "comm_s"), ("  ep a2a", "ep_s"), ("  dp allreduce", "dp_s"),
        ("idle", "idle_s"), ("  peer wait", "wait_s"))


MAX_RANKS = 1024
"""Processes a measuring command starts on this one machine."""


@o.with_layout_flags("mbs", mbs=4)
def probe(
    layout: dict[str, Any],
    model: Annotated[str, typer.Option("--model", "-m", help="probe-dense, probe-moe, a catalog model or a file")] = (
        DEFAULT_PROBE_MODEL
    ),
    nproc: Annotated[int, typer.Option("--nproc", help="ranks (processes) on this machine; DP size")] = 2,
    ep: Annotated[int | None, typer.Option("--ep", help="expert parallel size (default: nproc if MoE, else 1)")] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", help="sequence length (tokens)")] = 256,
    micro_batches: Annotated[int, typer.Option("--micro-batches", help="micro-batches per step (accumulated)")] = 1,
    steps: Annotated[int, typer.Option("--steps", help="timed steps (the median one is reported)")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", help="untimed steps first")] = 2,
    seed: Annotated[int, typer.Option("--seed", help="initialisation and data seed")] = 0,
    calibration: o.CalibrationOpt = None,
    tolerance_pct: Annotated[float, typer.Option("--tolerance-pct", help="|error| for the OK footer")] = 15.0,
    as_json: o.JsonOpt = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="also write the JSON document here")] = None,
) -> None:
    """Train a small transformer on this CPU under torch.distributed and compare its step with the prediction."""
    for name, value, high in (("--nproc", nproc, MAX_RANKS), ("--ep", ep, MAX_RANKS), ("--seq-len", seq_len, 1e6),
                              ("--micro-batches", micro_batches, 1e4), ("--steps", steps, 1e4)):
        o.within(name, value, 1, high)
    o.within("--warmup", warmup, 0, 1e4)
    o.within("--seed", seed, 0, 2**32 - 1)
    o.within("--tolerance-pct", tolerance_pct, 0, 1e4)
    from llmscale.measure import require_torch

    require_torch()
    from llmscale.measure.probe import ProbeConfig, probe_model, run_probe
    from llmscale.measure.probe_predict import ProbeSetup

    spec = probe_model(model)
    ep_size = ep if ep is not None else (nproc if spec.is_moe else 1)
    config = ProbeConfig(ProbeSetup(spec, nproc, ep_size, seq_len, layout["mbs"], micro_batches), steps, warmup, seed,
                         calibration)
    document = run_probe(config)
    if document is None:  # a torchrun rank other than 0
        return
    document["tolerance_pct"] = tolerance_pct
    if output is not None:
        try:
            output.write_text(strict_dumps(document), encoding="utf-8")
        except OSError as exc:
            raise InputFileError(f"--output {output}: cannot write ({exc})") from None
        typer.echo(f"wrote {output}", err=True)
    typer.echo(strict_dumps(document) if as_json else probe_table(document))


def _row(name: str, key: str, document: dict[str, Any]) -> dict[str, Any]:
    measured, predicted = document["measured"].get(key), document["predicted"].get(key)
    error = 100.0 * (predicted - measured) / measured if measured and predicted is not None else None
    return {"part": name, "measured": measured, "predicted": predicted, "error": error}


def probe_table(document: dict[str, Any]) -> str:
    """The measured-vs-predicted table (rows and JSON share keys: `measured`/`predicted` of the document)."""
    from llmscale.measure.table import Column, render, version_line

    spec, lay, host = document["model"], document["layout"], document["host"]["cluster"]
    gpu, tier = host["gpu"], host["tiers"][0]
    eff = gpu["efficiency"]
    params, load = document["params"], document["host_load"]
    preempted = " ".join(f"{p:.0f}" for p in load["preemptions_per_step"])
    experts = f", {spec['experts']} experts top-{spec['top_k']}" if spec["experts"] else ""
    preamble = [
        f"llmscale probe  {version_line(document['versions'])}",
        f"device {document['device']} · backend gloo · {document['nproc']} ranks × "
        f"{document['threads_per_rank']} thread",
        f"host load before the run {load['load_avg_1min_before']:.2f} (1-min average, {load['cpus']} CPUs) · "
        f"involuntary context switches per step and rank: {preempted}",
        f"model {spec['name']}: {spec['layers']} layers, hidden {spec['hidden']}{experts} · "
        f"{params['probe_total']:,} params (llmscale: {params['llmscale_total_params']:,})",
        f"layout dp {lay['dp']} ep {lay['ep']} mbs {lay['mbs']} zero {lay['zero']} · seq {document['train']['seq_len']}"
        f" · gbs {document['train']['global_batch']} · median of {document['steps']} steps after "
        f"{document['warmup']} warm-up, parts averaged over ranks",
        f"cpu-host (measured this run): peak {gpu['peak_bf16_tflops'] * 1e3:.1f} GFLOP/s fp32 · gemm "
        f"{eff['gemm_bf16']:.2f} · attention {eff['attention']:.2f} (bwd {eff['attention_backward']:.2f}) · "
        f"copy {gpu['memory_bandwidth_gb_per_s']:.1f} GB/s × hbm {eff['hbm']:.3f} · tier "
        f"{tier['bandwidth_gb_per_s']:.2f} GB/s {tier['latency_us']:.0f} us",
        f"input_sha256 {document['input_sha256']}",
    ]
    if document.get("calibration"):
        cal = document["calibration"]
        preamble.append(f"calibration {cal['file']} (sha256 {cal['sha256'][:16]}…, {cal['device']}, {cal['date']}): "
                        f"{len(cal['changed'])} fields replaced; in-run prediction "
                        f"{cal['predicted_step_s_in_run_measurements'] * 1e3:.1f} ms")
        if cal["device_mismatch"]:
            preamble.append(f"warning: {cal['device_mismatch']}")
    columns = [Column("part", "part", "", 14), Column("measured", "measured", "ms", 10, ".1f", 1e-3),
               Column("predicted", "predicted", "ms", 10, ".1f", 1e-3), Column("error", "error", "%", 8, "+.1f")]
    rows = [_row(name, key, document) for name, key in ROWS]
    matched = document["prediction_matched_to_probe"]
    error, tolerance = document["error_pct"], document.get("tolerance_pct", 15.0)
    verdict = "OK" if abs(error) <= tolerance else "FAILED"
    footer = [
        f"prediction: estimate_step on cpu-host; DP all-reduce unoverlapped as the probe runs it (the step model's "
        f"overlapped dp_exposed: {matched['dp_exposed_s_in_step_model'] * 1e3:.1f} ms); step_overhead_s "
        f"{matched['step_overhead_s_left_out'] * 1e3:.0f} ms left out (no data loading or logging in the probe); "
        f"sustained_compute_fraction {matched.get('sustained_compute_fraction_left_out', 1.0):g} left out (kernel "
        "rates measured in this run on the probe's own shapes)",
        f"measured_step_s {document['measured_step_s']:.4f}  predicted_step_s {document['predicted_step_s']:.4f}  "
        f"error_pct {error:+.1f}  (tolerance ±{tolerance:g}%): {verdict}",
    ]
    return render(preamble, columns, rows, footer)
