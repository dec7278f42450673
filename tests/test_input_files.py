"""Input files read strictly (io.strict): every file-system problem, duplicate key, non-standard YAML tag, deep
nesting or oversized file is one `error:` line naming the path, exit code 2 — on every reader (a model, cluster or
calibration file, a published-runs file, a saved plan, a launch text read back). One test per failure class; each
comment says why the input is bad."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from llmscale.io import strict
from tests.test_cli_errors import TINY_MODEL, assert_one_line, memory_on, run_inprocess, run_subprocess

Capsys = pytest.CaptureFixture[str]


def tiny_yaml(tmp_path: Path, text: str, name: str = "model.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_duplicate_yaml_key_names_the_key_and_both_lines(tmp_path: Path, capsys: Capsys) -> None:
    # `layers` twice: YAML keeps the last one without a word, so the user would plan a model they did not write.
    path = tiny_yaml(tmp_path, yaml.safe_dump(TINY_MODEL, sort_keys=False) + "layers: 96\n")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "'layers' is given twice", "lines 2 and 7")


def test_a_duplicate_key_in_a_nested_mapping(tmp_path: Path, capsys: Capsys) -> None:
    # `mla` holds `kv_lora_rank` twice: the check is per mapping, at any depth.
    text = yaml.safe_dump(TINY_MODEL, sort_keys=False) + "mla:\n  kv_lora_rank: 512\n  kv_lora_rank: 256\n"
    path = tiny_yaml(tmp_path, text)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "'kv_lora_rank' is given twice")


def test_a_duplicate_json_key(tmp_path: Path, capsys: Capsys) -> None:
    # json.loads keeps the last "hidden"; the file says two different things.
    text = json.dumps(TINY_MODEL)[:-1] + ', "hidden": 512}'
    path = tiny_yaml(tmp_path, text, "model.json")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "'hidden' is given twice")


def test_json_nan_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    # NaN is not JSON (RFC 8259 §6); Python's json reads it unless told not to.
    text = json.dumps(TINY_MODEL)[:-1] + ', "norm_eps": NaN}'
    path = tiny_yaml(tmp_path, text, "model.json")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "NaN (key 'norm_eps' at line 1",
                    "is not a JSON number")


@pytest.mark.parametrize("tag", ["!!binary aGVsbG8=", "!!set {a, b}", "!!python/object:os.system x", "!mine 3"])
def test_a_non_standard_yaml_tag_is_refused(tmp_path: Path, capsys: Capsys, tag: str) -> None:
    # No spec field holds bytes, sets, Python objects or a local type: the tag cannot mean anything here.
    path = tiny_yaml(tmp_path, yaml.safe_dump(TINY_MODEL, sort_keys=False) + f"source: {tag}\n")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "tag", "is not accepted", "line 7")


def test_an_unquoted_date_reads_as_its_text() -> None:
    # YAML 1.1 turns `2025-01-31` into a date object; the same file in JSON would hold the string.
    assert strict.parse_text("date: 2025-01-31\n", "x", as_json=False) == {"date": "2025-01-31"}


DEEP = [("{a: " * 200 + "1" + "}" * 200, ".yaml"), ("[" * 100 + "]" * 100, ".yaml"), ("[" * 5000 + "]" * 5000, ".json"),
        ('{"a":' * 80 + "1" + "}" * 80, ".json")]


@pytest.mark.parametrize(("text", "suffix"), DEEP)
def test_deep_nesting_is_refused(tmp_path: Path, capsys: Capsys, text: str, suffix: str) -> None:
    # No spec nests more than a few levels; a file nested hundreds deep is not a spec (and would recurse).
    path = tiny_yaml(tmp_path, text, "deep" + suffix)
    line = assert_one_line(*run_inprocess(capsys, *memory_on(path)), path)
    assert "nested deeper than 64" in line or "nesting depth" in line


def test_an_oversized_file_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    # 17 MiB of comments: far beyond any input llmscale reads (the bound is 16 MiB).
    path = tiny_yaml(tmp_path, yaml.safe_dump(TINY_MODEL) + "#" * (17 * 2**20) + "\n")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "larger than 16 MiB")


def test_a_directory(tmp_path: Path, capsys: Capsys) -> None:
    # A directory has no text to read.
    assert_one_line(*run_inprocess(capsys, *memory_on(str(tmp_path))), str(tmp_path), "is a directory")


def test_a_file_name_too_long(tmp_path: Path) -> None:
    # 300 characters exceed NAME_MAX (255 on Linux): open() fails with ENAMETOOLONG.
    path = str(tmp_path / ("m" * 300 + ".yaml"))
    assert_one_line(*run_subprocess("memory", "--model", path, "--cluster", "selene"), "file name too long")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(tmp_path: Path, capsys: Capsys) -> None:
    # Mode 000: the user may not read it.
    path = tiny_yaml(tmp_path, yaml.safe_dump(TINY_MODEL))
    os.chmod(path, 0)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), path, "permission denied")


def test_text_that_is_not_utf8(tmp_path: Path, capsys: Capsys) -> None:
    # 0xff never occurs in UTF-8.
    path = tmp_path / "model.yaml"
    path.write_bytes(b"name: tiny\xff\n")
    assert_one_line(*run_inprocess(capsys, *memory_on(str(path))), str(path), "not UTF-8", "0xff at offset 10")


def test_a_published_runs_file_is_read_as_strictly(tmp_path: Path, capsys: Capsys) -> None:
    # validate reads its runs through the same reader: a row with `tp` twice is an error, not the last value.
    path = tiny_yaml(tmp_path, "- name: a\n  tp: 8\n  tp: 4\n", "runs.yaml")
    assert_one_line(*run_inprocess(capsys, "validate", "--runs", path), path, "'tp' is given twice")


def test_a_saved_plan_is_read_as_strictly(tmp_path: Path, capsys: Capsys) -> None:
    # --from-plan reads JSON: a layout with "tp" twice says two layouts.
    path = tiny_yaml(tmp_path, '{"layout": {"tp": 8, "tp": 4}, "num_gpus": 8}', "plan.json")
    assert_one_line(*run_inprocess(capsys, "explain", "--from-plan", path), path, "'tp' is given twice")


def test_a_launch_text_read_back_that_is_missing(tmp_path: Path, capsys: Capsys) -> None:
    # read-megatron reads a file like every other command.
    path = str(tmp_path / "args.txt")
    assert_one_line(*run_inprocess(capsys, "read-megatron", path), path, "no such file")
