"""The model constants are one typed object, passed in: the catalog's load within their bounds, a caller's own
values change the estimate without touching any module, a calibration profile's overrides reach the cost model,
and the fit script hands its trial values over the same way (no monkey-patching)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from llmscale.cost.step import estimate_step
from llmscale.io.calibration import write_profile
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.layout.arrays import Layouts
from llmscale.specs.calibration import CalibrationProfile, DeviceInfo, Versions
from llmscale.specs.constants import Constants
from llmscale.specs.train import TrainSpec
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
GPT3 = ["--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8", "--dp", "24", "--gbs", "1536",
        "--seq-len", "2048"]


def gpt3_step(constants: Constants) -> float:
    model, cluster = load_model("gpt3-175b"), load_cluster("selene", num_gpus=1536)
    train = TrainSpec(seq_len=2048, global_batch=1536)
    lay = Layouts.from_columns(tp=8, pp=8, dp=24)
    return float(estimate_step(model, cluster, train, lay, constants).step_time_s[0])


def test_catalog_constants_are_whole_and_inside_their_bounds() -> None:
    constants = load_constants()
    assert constants == load_constants()  # a fresh object each time, equal values
    assert constants is not load_constants()
    # A value outside a field's physical range is refused, naming the field: an exposed share above 1 would mean
    # overlapping makes communication slower than not overlapping it.
    with pytest.raises(ValidationError, match="tp_comm_exposed_fraction"):
        constants.with_overrides({"step": {"tp_comm_exposed_fraction": 1.5}})
    with pytest.raises(ValidationError, match="no_such_constant"):
        constants.with_overrides({"step": {"no_such_constant": 1.0}})


def test_constants_passed_in_change_the_step_and_nothing_else() -> None:
    # The step's fixed overhead is added once per step (cost.step._assemble): one more second of it is one more
    # second of step time, exactly, and the catalog's constants are untouched afterwards.
    base = load_constants()
    slower = base.with_overrides({"step": {"step_overhead_s": base.step.step_overhead_s + 1.0}})
    before = gpt3_step(base)
    assert gpt3_step(slower) == pytest.approx(before + 1.0, abs=1e-9)
    assert gpt3_step(load_constants()) == before


def test_a_calibration_profile_overrides_constants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "explain", *GPT3, "--json")
    assert code == 0, err
    plain = json.loads(out)
    profile = CalibrationProfile(device=DeviceInfo(kind="cuda", name="test", ranks=8), date="2026-01-01",
                                 versions=Versions(llmscale="0", torch="2.13.0", python="3.11"),
                                 constants={"step": {"step_overhead_s": 2.5}})
    path = tmp_path / "overhead.yaml"
    write_profile(profile, path)
    code, out, err = run_cli(capsys, "explain", *GPT3, "--calibration", str(path), "--json")
    assert code == 0, err
    calibrated = json.loads(out)
    assert calibrated["breakdown"]["overhead_s"] == 2.5
    added = 2.5 - plain["breakdown"]["overhead_s"]
    assert calibrated["step_time_s"] == pytest.approx(plain["step_time_s"] + added, rel=1e-12)
    assert calibrated["input_sha256"] != plain["input_sha256"]  # other constants, other inputs


def test_a_profile_with_an_unknown_or_absurd_constant_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for overrides, needle in (({"step": {"tp_comm_exposed_fraction": 3.0}}, "tp_comm_exposed_fraction"),
                              ({"stepp": {"step_overhead_s": 1.0}}, "stepp")):
        profile = CalibrationProfile(device=DeviceInfo(kind="cuda", name="test", ranks=8), date="2026-01-01",
                                     versions=Versions(llmscale="0", torch="2.13.0", python="3.11"),
                                     constants=overrides)
        path = tmp_path / "bad.yaml"
        write_profile(profile, path)
        code, _, err = run_cli(capsys, "explain", *GPT3, "--calibration", str(path))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and needle in lines[0], err


def _fit_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fit_efficiency", ROOT / "scripts" / "fit_efficiency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_efficiency"] = module
    spec.loader.exec_module(module)
    return module


def test_the_fit_script_hands_its_trial_constants_over_without_patching() -> None:
    import llmscale.cost.step as step_module

    fit = _fit_script()
    from llmscale.validation.jobs import job_from_run
    from llmscale.validation.runs import load_runs

    constants = load_constants()
    run = next(r for r in load_runs() if r.name == "Megatron-LM 2021 Table2 PTD-P GPT 174.6B on 1536 A100 (mbs 1)")
    jobs = [(run, job_from_run(run, constants))]
    params: dict[str, Any] = {key: getattr(constants.step, key) for key in fit.BOUNDS}
    names_before = dict(vars(step_module))
    base = fit.predict(jobs, params)[0]
    slower = fit.predict(jobs, {**params, "step_overhead_s": params["step_overhead_s"] + 10.0})[0]
    assert slower < base  # the trial value reached the cost model
    assert dict(vars(step_module)) == names_before  # and no module attribute was replaced to get it there
    assert fit.predict(jobs, params)[0] == base
