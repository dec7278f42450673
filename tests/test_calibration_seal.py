"""Calibration profiles: an unsealed or edited profile is refused unless `--allow-unsealed`, and then every output
says so (a `warning:` line, `calibration.sealed: false` in the JSON); every measured number is bounded, so an absurd
profile is refused even when re-sealed. One test per failure class; each comment says why the profile is bad."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer

from llmscale.cli.main import app
from llmscale.io.calibration import seal, write_profile
from llmscale.specs.calibration import CalibrationProfile
from tests.test_cli_errors import assert_one_line
from tests.test_measure import LLAMA, profile, run

Capsys = pytest.CaptureFixture[str]


def unsealed(tmp_path: Path, **changes: Any) -> Path:
    """A profile written with no sha256 (as a hand-made or hand-edited one is)."""
    path = tmp_path / "unsealed.yaml"
    body = profile(**changes).model_dump(mode="json", exclude={"constants", "sha256"})
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return path


def test_a_profile_without_a_seal_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    # Nothing says these numbers are what `llmscale calibrate` measured.
    path = unsealed(tmp_path)
    assert_one_line(*run(capsys, "explain", *LLAMA, "--calibration", str(path))[::2], str(path), "no sha256 seal",
                    "--allow-unsealed")


def test_an_edited_profile_is_refused_with_or_without_its_seal_line(tmp_path: Path, capsys: Capsys) -> None:
    # The seal no longer matches the body: a number was changed by hand after it was measured.
    path = tmp_path / "p.yaml"
    write_profile(profile(), path)
    path.write_text(path.read_text().replace("1200000000000.0", "2400000000000.0"), encoding="utf-8")
    assert_one_line(*run(capsys, "memory", *LLAMA, "--calibration", str(path))[::2], "does not match", "edited")


def test_allow_unsealed_uses_it_and_every_output_says_so(tmp_path: Path, capsys: Capsys) -> None:
    path = unsealed(tmp_path)
    code, out, err = run(capsys, "explain", *LLAMA, "--calibration", str(path), "--allow-unsealed", "--json")
    assert code == 0, err
    assert err.strip().splitlines() == [f"warning: {path}: has no sha256 seal (llmscale calibrate seals every "
                                        "profile it writes); using it as it stands (--allow-unsealed)"]
    document = json.loads(out)
    assert document["calibration"] == {"sha256": profile().body_sha256(), "sealed": False, "device": "cuda (test)"}
    assert "UNSEALED profile" in document["inputs"]["cluster"]["gpu"]["source"]
    code, out, err = run(capsys, "validate", "--calibration", str(path), "--allow-unsealed", "--json")
    assert code == 0 and "warning:" in err and json.loads(out)["calibration"]["sealed"] is False


def test_a_sealed_profile_is_recorded_as_sealed(tmp_path: Path, capsys: Capsys) -> None:
    path = tmp_path / "p.yaml"
    sealed = write_profile(profile(), path)
    code, out, err = run(capsys, "explain", *LLAMA, "--calibration", str(path), "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["calibration"] == {"sha256": sealed.sha256, "sealed": True, "device": "cuda (test)"}


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("memory", "copy_bytes_per_s", float("inf")),  # an infinite bandwidth makes every memory-bound op free
        ("memory", "copy_bytes_per_s", 1e-300),  # below 1 MB/s: a unit slip, and step times of 1e290 s
        ("memory", "copy_bytes_per_s", 1e308),  # above 1 PB/s: 50× the fastest HBM
        ("gemm", "half_dim", float("inf")),  # gave step_time_s NaN in the fuzz run
        ("gemm", "peak_flops_per_s", 1e30),  # 10^13 × a GB300's FP4 peak
        ("collective", "small_time_s", float("nan")),  # a timer that measured nothing
        ("collective", "busbw_bytes_per_s", 0.5),  # half a byte per second
    ],
)
def test_an_absurd_number_is_refused_even_when_sealed(tmp_path: Path, capsys: Capsys, section: str, key: str,
                                                       value: float) -> None:
    body = profile().model_dump(mode="json", exclude={"constants", "sha256"})
    target = {"memory": body["memory"], "gemm": body["gemm"][0],
              "collective": body["scopes"][0]["collectives"][0]}[section]
    target[key] = value
    with pytest.raises(ValueError):  # the spec itself refuses it: nothing absurd can be sealed
        seal(CalibrationProfile.model_validate(body))
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(body).replace("NaN", ".nan").replace("Infinity", ".inf"), encoding="utf-8")
    assert_one_line(*run(capsys, "explain", *LLAMA, "--calibration", str(path), "--allow-unsealed")[::2], key)


def test_every_command_with_calibration_takes_allow_unsealed() -> None:
    # A profile a user may pass must be one they can vouch for explicitly on every command that reads it.
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    for name, sub in command.commands.items():
        flags = {opt for param in sub.params for opt in param.opts}
        if "--calibration" in flags and name not in ("probe", "allocate"):
            assert "--allow-unsealed" in flags, name
