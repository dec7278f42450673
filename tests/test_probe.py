"""`llmscale probe` on CPU with gloo: the probe trains dense and MoE models with 2 ranks, its JSON carries the
measured and predicted splits, the EP dispatch/combine moves every token copy to its expert's rank and back
exactly, and bad input is one line with exit code 2.

The probe runs use tiny models (2 layers, hidden 64) so each finishes in seconds; they check structure and sanity,
not the 15% agreement, which needs the default sizes and an otherwise idle host (issue 7's closing note).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

torch = pytest.importorskip("torch")

from llmscale.cli.main import main  # noqa: E402
from llmscale.cost.params import count_params  # noqa: E402
from llmscale.io.calibration import write_profile  # noqa: E402
from llmscale.measure.launch import Context, launch  # noqa: E402
from llmscale.measure.probe_dispatch import CommClock, EPGroup, moe_exchange  # noqa: E402
from llmscale.measure.probe_model import ProbeTransformer  # noqa: E402
from llmscale.specs.calibration import CalibrationProfile  # noqa: E402
from llmscale.specs.model import ModelSpec  # noqa: E402

TINY_DENSE: dict[str, Any] = {"name": "tiny-dense", "layers": 2, "hidden": 64, "ffn_hidden": 160, "heads": 4,
                              "vocab": 512}
TINY_MOE: dict[str, Any] = {**TINY_DENSE, "name": "tiny-moe", "experts": 4, "top_k": 2, "expert_ffn_hidden": 64,
                            "shared_experts": 1}
FAST = ["--nproc", "2", "--seq-len", "32", "--mbs", "2", "--steps", "3", "--warmup", "1"]


def _model_file(tmp_path: Path, spec: dict[str, Any]) -> str:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `main(argv)` in this process."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def _assert_one_line(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _check_document(doc: dict[str, Any]) -> None:
    for key in ("measured_step_s", "predicted_step_s", "error_pct", "measured", "predicted", "per_step", "host",
                "input_sha256", "prediction_matched_to_probe"):
        assert key in doc, key
    for side in ("measured", "predicted"):
        split = doc[side]
        for key in ("step_s", "compute_s", "comm_s", "idle_s"):
            assert math.isfinite(split[key]), (side, key)
        # The split adds up to the step.
        assert split["compute_s"] + split["comm_s"] + split["idle_s"] == pytest.approx(split["step_s"], rel=1e-9)
        assert split["compute_s"] > 0 and split["comm_s"] > 0
    assert doc["measured_step_s"] == doc["measured"]["step_s"]
    assert doc["predicted_step_s"] == doc["predicted"]["step_s"]
    assert doc["error_pct"] == pytest.approx(100 * (doc["predicted_step_s"] / doc["measured_step_s"] - 1))
    # Gross sanity only (a unit slip would be orders of magnitude off); the 15% bar needs the default sizes, where
    # kernels outweigh eager torch's per-op costs, and an otherwise idle host.
    assert 0.1 < doc["predicted_step_s"] / doc["measured_step_s"] < 10
    # The probe's torch model has exactly llmscale's parameter count for its spec.
    assert doc["params"]["probe_total"] == doc["params"]["llmscale_total_params"]
    assert len(doc["per_step"]) == 3
    for step in doc["per_step"]:
        parts = step["forward_s"] + step["backward_s"] + step["optimizer_s"] + step["ep_s"] + step["dp_s"]
        assert parts <= step["step_s"] * (1 + 1e-6)


def test_probe_dense_two_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_DENSE), *FAST, "--json")
    assert code == 0, err
    doc = json.loads(out)
    _check_document(doc)
    assert doc["layout"]["dp"] == 2 and doc["layout"]["ep"] == 1
    assert doc["measured"]["ep_s"] == 0 and doc["measured"]["dp_s"] > 0


def test_probe_moe_expert_parallel_two_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_MOE), *FAST, "--json")
    assert code == 0, err
    doc = json.loads(out)
    _check_document(doc)
    assert doc["layout"]["ep"] == 2  # MoE defaults to ep = nproc: tokens cross ranks through all_to_all
    assert doc["measured"]["ep_s"] > 0 and doc["predicted"]["ep_s"] > 0


def test_probe_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "probe.json"
    code, out, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_DENSE), *FAST, "-o", str(out_file))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# llmscale probe")
    assert any(line.split()[:1] == ["step"] for line in lines)
    assert "error_pct" in lines[-1] and lines[-1].rstrip().endswith(("OK", "FAILED"))
    assert "measured_step_s" in json.loads(out_file.read_text(encoding="utf-8"))


# --- EP dispatch / combine --------------------------------------------------------------------------------------

NUM_EXPERTS, TOP_K, HIDDEN, TOKENS = 4, 2, 8, 12


def _tokens(rank: int) -> torch.Tensor:
    """Token t of rank r carries (r, t, ...) in its features: small integers, exact in bf16 on the wire."""
    rows = torch.arange(TOKENS, dtype=torch.float32)
    return torch.stack([torch.full((TOKENS,), float(rank)), rows, *(rows % 3 + c for c in range(HIDDEN - 2))], 1)


def _routes(rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(rank)
    return torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(TOKENS)])


def _dispatch_worker(ctx: Context, payload: None) -> dict[str, Any]:
    """Each rank owns NUM_EXPERTS / 2 experts; expert e multiplies its rows by e + 1 and records what it saw."""
    import torch.distributed as dist

    ep = EPGroup(ctx.world_size, ctx.rank, None, tuple(range(ctx.world_size)), CommClock())
    local = NUM_EXPERTS // ep.size
    seen: list[tuple[int, int, int]] = []

    def expert(e: int, rows: torch.Tensor) -> torch.Tensor:
        global_id = ctx.rank * local + e
        seen.extend((int(r[0]), int(r[1]), global_id) for r in rows)
        return rows * (global_id + 1)

    x = _tokens(ctx.rank).requires_grad_(True)
    index = _routes(ctx.rank)
    out = moe_exchange(x, index, torch.ones(TOKENS, TOP_K), NUM_EXPERTS, ep, expert)
    out.sum().backward()
    assert x.grad is not None
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, {"seen": seen, "out": out.tolist(), "grad": x.grad.tolist(),
                                      "calls": len(ep.clock.events)})
    return {"ranks": gathered}


def test_ep_dispatch_combine_round_trips_tokens_exactly() -> None:
    result = launch(_dispatch_worker, None, 2, "gloo")
    for rank, got in enumerate(result["ranks"]):
        factor = _routes(rank).float().add(1).sum(1, keepdim=True)
        # Combine brought each copy back to its token: out = x · Σ_k (e_k + 1), grad = Σ_k (e_k + 1), exactly.
        assert torch.equal(torch.tensor(got["out"]), _tokens(rank) * factor)
        assert torch.equal(torch.tensor(got["grad"]), factor.expand(TOKENS, HIDDEN))
        assert got["calls"] == 5  # forward: counts, dispatch, combine; backward: combine's and dispatch's gradients
    # Every copy reached the rank that owns its expert, and only those: (source, token, expert) triples.
    seen = sorted(tuple(t) for got in result["ranks"] for t in got["seen"])
    expected = sorted((src, t, int(e)) for src in range(2) for t, row in enumerate(_routes(src)) for e in row)
    assert seen == expected
    owner_of = {e: e // (NUM_EXPERTS // 2) for e in range(NUM_EXPERTS)}
    for rank, got in enumerate(result["ranks"]):
        assert all(owner_of[e] == rank for _, _, e in got["seen"])


def test_dispatch_without_peers_is_the_identity_permutation() -> None:
    """ep = 1: the same code path without all_to_all; combine(dispatch(x)) with identity experts is x · Σ weights."""
    ep = EPGroup(1, 0, None, (0,), CommClock())
    x = torch.randn(TOKENS, HIDDEN)
    weights = torch.rand(TOKENS, TOP_K)
    out = moe_exchange(x, _routes(0), weights, NUM_EXPERTS, ep, lambda e, rows: rows)
    torch.testing.assert_close(out, x * weights.sum(1, keepdim=True))
    assert ep.clock.events == []


def test_probe_model_has_llmscale_parameter_count() -> None:
    spec = ModelSpec(**TINY_MOE)
    net = ProbeTransformer(spec, 16, EPGroup(1, 0, None, (0,), CommClock()))
    assert sum(p.numel() for p in net.parameters()) == count_params(spec).total


# --- bad input ---------------------------------------------------------------------------------------------------


def test_ep_must_divide_the_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # EP groups fold inside DP: 2 ranks cannot hold EP groups of 3.
    code, _, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_MOE), "--nproc", "2", "--ep", "3")
    _assert_one_line(code, err, "ep", "3")


def test_ep_on_a_dense_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A dense model has no experts to spread.
    code, _, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_DENSE), "--ep", "2")
    _assert_one_line(code, err, "ep", "dense")


def test_unsupported_architecture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The probe builds RMSNorm transformers only.
    model = _model_file(tmp_path, {**TINY_DENSE, "norm": "layernorm"})
    code, _, err = _run(capsys, "probe", "--model", model)
    _assert_one_line(code, err, "norm", "layernorm", "rmsnorm")


def test_zero_steps(capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing would be measured.
    code, _, err = _run(capsys, "probe", "--steps", "0")
    _assert_one_line(code, err, "steps", "0")


def test_one_rank(capsys: pytest.CaptureFixture[str]) -> None:
    # No collective to measure with a single process.
    code, _, err = _run(capsys, "probe", "--nproc", "1")
    _assert_one_line(code, err, "nproc", "1")


def test_model_too_large_for_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama 3 70B's weights, gradients and Adam states would not fit in this machine's memory.
    code, _, err = _run(capsys, "probe", "--model", "llama3-70b")
    _assert_one_line(code, err, "model", "GiB")


def test_without_torch_one_line() -> None:
    """torch hidden from the import system: the command names the extra to install, exit code 2."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from llmscale.cli.main import main\nmain(['probe'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    _assert_one_line(proc.returncode, proc.stderr, "pip install 'llmscale[measure]'")


def test_probe_with_a_calibration_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--calibration: apply_calibration puts the profile's GEMM rate, copy bandwidth and tier in place of the
    in-run ones; the document lists what changed and keeps the in-run prediction beside it."""
    profile = {
        "format": 1, "device": {"kind": "cpu", "name": "test cpu", "ranks": 2}, "date": "2026-01-01T00:00:00+00:00",
        "versions": {"llmscale": "0.1.0", "torch": "2.13.0", "python": "3.11"},
        "gemm": [{"dtype": "float32", "precision": "bf16", "peak_flops_per_s": 5e10, "half_dim": 8.0}],
        "memory": {"copy_bytes_per_s": 2e10, "size_bytes": 67108864},
        "scopes": [{"scope": "intra-node", "tier": 0, "ranks": 2, "backend": "gloo", "collectives": [
            {"op": "all_reduce", "busbw_bytes_per_s": 1e9, "large_bytes": 16777216, "small_time_s": 2e-4,
             "small_bytes": 4096}]}],
    }
    path = tmp_path / "calibration.yaml"
    write_profile(CalibrationProfile.model_validate(profile), path)  # sealed, as llmscale calibrate writes it
    code, out, err = _run(capsys, "probe", "--model", _model_file(tmp_path, TINY_DENSE), *FAST,
                          "--calibration", str(path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    _check_document(doc)
    cal = doc["calibration"]
    # The profile's copy rate (20 GB/s) times the share of a copy the probe's eager kernels reach (in-run).
    gpu = doc["host"]["cluster"]["gpu"]
    bandwidth, hbm = gpu["memory_bandwidth_gb_per_s"], gpu["efficiency"]["hbm"]
    in_run_hbm = cal["changed"].get("cluster.gpu.efficiency.hbm", [hbm])[0]
    assert bandwidth * hbm == pytest.approx(min(20.0 * in_run_hbm, bandwidth))
    assert "cluster.tiers.0.bandwidth_gb_per_s" in cal["changed"]
    assert cal["predicted_step_s_in_run_measurements"] > 0
    assert "test cpu" in cal["device_mismatch"]


def test_missing_calibration_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A profile that is not there cannot calibrate anything.
    code, _, err = _run(capsys, "probe", "--calibration", str(tmp_path / "none.yaml"))
    _assert_one_line(code, err, "none.yaml")
