"""Outputs: strict JSON everywhere (no NaN or Infinity: null with a reason), and `--from-plan` beside a layout flag
that contradicts the file is an error naming the flag, for every layout flag (nothing the user typed is ignored)."""

from __future__ import annotations

import ast
import json
import math
from enum import Enum
from pathlib import Path

import pytest

from llmscale.report.strict_json import finite_only, strict_dumps
from llmscale.specs.layout import LAYOUT_FIELDS
from tests.test_cli_errors import GPT3_LAYOUT, assert_one_line, run_inprocess

Capsys = pytest.CaptureFixture[str]
CLI = Path(__file__).resolve().parents[1] / "src" / "llmscale" / "cli"


def test_a_non_finite_value_becomes_null_with_a_reason() -> None:
    # json.dumps writes NaN and Infinity by default: no strict parser reads them (RFC 8259 §6).
    text = strict_dumps({"error_pct": math.nan, "rows": [1.0, math.inf], "nested": {"x": -math.inf}})
    document = json.loads(text, parse_constant=pytest.fail)
    assert document == {"error_pct": None, "error_pct_reason": "not a finite number (nan)", "rows": [1.0, None],
                        "nested": {"x": None, "x_reason": "not a finite number (-inf)"}}


def test_a_reason_the_document_gives_is_kept() -> None:
    assert finite_only({"x": math.nan, "x_reason": "no row evaluated"}) == {"x": None, "x_reason": "no row evaluated"}


def test_every_cli_json_output_goes_through_the_strict_helper() -> None:
    # One json.dumps left in a command would print NaN again; the commands write JSON only through strict_dumps.
    offenders = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("dumps", "dump") and \
                    isinstance(node.value, ast.Name) and node.value.id == "json":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def _other_value(field_name: str, saved: object) -> list[str]:
    """Flag arguments that set `field_name` to something other than `saved`."""
    field = next(f for f in LAYOUT_FIELDS if f.name == field_name)
    flag = field.knob.cli_flag(field.name)
    if field.kind is bool:
        return [flag] if not saved else ([] if field.is_flag else [f"--no-{flag[2:]}"])
    if field.kind is int:
        return [flag, str(int(saved) + 1)]  # type: ignore[call-overload]
    assert issubclass(field.kind, Enum)
    return [flag, next(m.value for m in field.kind if m.value != saved)]


@pytest.mark.parametrize("name", [f.name for f in LAYOUT_FIELDS])
def test_from_plan_with_a_contradicting_layout_flag_names_it(tmp_path: Path, capsys: Capsys, name: str) -> None:
    # The file fixes the layout: a flag that says otherwise would be silently overridden (or silently override).
    with pytest.raises(SystemExit):
        from llmscale.cli.main import main

        main(["explain", *GPT3_LAYOUT, "--json"])
    path = tmp_path / "explain.json"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    saved = json.loads(path.read_text())["layout"][name]
    args = _other_value(name, saved)
    if not args:
        pytest.skip(f"{name} is an on-switch already on in the file: no flag contradicts it")
    flag = next(f for f in LAYOUT_FIELDS if f.name == name).knob.cli_flag(name)  # --sp also for --no-sp
    assert_one_line(*run_inprocess(capsys, "explain", "--from-plan", str(path), *args), f"{flag} disagree")


def test_from_plan_with_agreeing_flags_runs(tmp_path: Path, capsys: Capsys) -> None:
    from llmscale.cli.main import main

    with pytest.raises(SystemExit):
        main(["explain", *GPT3_LAYOUT, "--json"])
    path = tmp_path / "explain.json"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    code, err = run_inprocess(capsys, "explain", "--from-plan", str(path), "--tp", "8", "--pp", "8", "--sp",
                              "--recompute", "none", "--gbs", "1536")
    assert code == 0, err
