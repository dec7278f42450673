"""The run config (runtime/config.py): one line per bad value naming the field, the value and what is allowed; a hash
that sees every value and nothing else; the shipped example config loads. No torch needed."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from llmscale.errors import InputFileError, SpecError
from llmscale.runtime.auto import choose
from llmscale.runtime.config import config_sha256, load_config, parse_config
from llmscale.runtime.files import Heartbeat, RunPaths, StepRecord, append_step, read_heartbeat, read_steps, run_id
from llmscale.runtime.files import write_heartbeat as write_beat

BASE: dict[str, Any] = {"name": "t"}


@pytest.mark.parametrize(("edit", "field", "allowed"), [
    ({"model": {"n_layer": 0}}, "model.n_layer", "greater than or equal to 1"),     # a model needs a layer
    ({"model": {"d_model": 30, "n_head": 4}}, "model.d_model", "multiple of n_head"),  # heads split d_model
    ({"model": {"nlayer": 2}}, "model.nlayer", "allowed keys: d_model"),          # a misspelt key is refused
    ({"bogus": 1}, "bogus", "unknown key"),
    ({"checkpoint": {"memory_every_steps": 0}}, "checkpoint.memory_every_steps", "'auto' or a whole number"),
    ({"checkpoint": {"storage_every_steps": "often"}}, "checkpoint.storage_every_steps", "'auto' or a whole"),
    ({"checkpoint": {"keep": 1}}, "checkpoint.keep", "greater than or equal to 2"),  # one kept = none safe
    ({"layout": {"dp": 2}}, "layout.dp", "nproc_per_node (1)"),                    # world size must match
    ({"batch": {"global_batch_size": 12, "micro_batch_size": 8}}, "batch.global_batch_size", "multiple of"),
    ({"schedule": {"warmup_steps": 50, "total_steps": 10}}, "schedule.warmup_steps", "at most total_steps"),
    ({"optimizer": {"lr": float("nan")}}, "optimizer.lr", "finite"),
    ({"seed": True}, "seed", "must be a number, not bool"),                       # true is not 1
    ({"precision": "fp8"}, "precision", "'fp32' or 'bf16'"),
    ({"user": {"warmup": float("nan")}}, "user", "plain values only"),               # not JSON: not hashable
    ({"user": ["a"]}, "user", "valid dictionary"),                                   # settings are a mapping
    ({"data": {"resumable": "no"}}, "data.resumable", "valid boolean"),
])
def test_a_bad_value_is_one_line_naming_field_value_and_rule(edit: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_config({**BASE, **edit}, where="run.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("run.yaml: ")
    assert info.value.field == field
    assert allowed in message


def test_hash_ignores_spelling_and_sees_every_value() -> None:
    implicit = parse_config({"name": "t"})
    explicit = parse_config({"seed": 1234, "name": "t", "checkpoint": {"keep": 2, "memory_every_steps": "auto"}})
    assert config_sha256(implicit) == config_sha256(explicit)  # defaults written out or not: the same config
    changed = parse_config({"name": "t", "seed": 1235})
    assert config_sha256(changed) != config_sha256(implicit)
    # the user's own settings: passed through as written and hashed; absent (or default data.resumable) they leave
    # the hash of a config written before those keys existed unchanged (regression pin: this repository's hash of
    # {"name": "t"} before them, computed with the parent commit's config_sha256)
    user = parse_config({"name": "t", "user": {"layers": [4, 8], "note": None}})
    assert user.user == {"layers": [4, 8], "note": None}
    assert config_sha256(user) != config_sha256(implicit)
    assert config_sha256(parse_config({"name": "t", "user": {"layers": [4, 9], "note": None}})) != config_sha256(user)
    assert config_sha256(parse_config({"name": "t", "data": {"resumable": True}})) == config_sha256(implicit)
    assert config_sha256(implicit).startswith("a4c5791e")
    assert len(config_sha256(implicit)) == 64


def test_the_shipped_example_config_loads_and_is_dp2(tmp_path: Path) -> None:
    path = Path(str(resources.files("llmscale.runtime.example").joinpath("run.yaml")))
    cfg = load_config(path)
    assert cfg.layout.dp == cfg.nproc_per_node == 2
    assert cfg.grad_accum_steps == 1
    bad = tmp_path / "run.yaml"
    bad.write_text("name: a\nname: b\n", encoding="utf-8")  # a duplicate key is refused, not last-wins
    with pytest.raises(InputFileError):
        load_config(bad)


def test_step_records_and_heartbeats_round_trip_and_bad_lines_are_counted(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    rec = StepRecord(3, 0, 1, "h", 1.5, 0.25, {"data": 0.05, "compute": 0.2}, 2.5, 128)
    append_step(paths, rec)
    with open(paths.steps(0), "a", encoding="utf-8") as handle:
        handle.write('{"step": 4, "rank"\n')  # a writer killed mid-line
    records, skipped = read_steps(paths, 0)
    assert records == [rec] and skipped == 1
    write_beat(paths, 0, Heartbeat(42, 3, 9.0, 1))
    assert read_heartbeat(paths, 0) == Heartbeat(42, 3, 9.0, 1)
    assert read_heartbeat(paths, 1) is None
    assert run_id(tmp_path) != run_id(tmp_path / "x") and len(run_id(tmp_path)) == 16


def test_auto_intervals_follow_the_costs() -> None:
    # Cheap snapshots and a costly storage save: snapshot often, save to storage rarely; a shorter MTBF shortens both.
    calm = choose(0.1, 0.01, 1.0, 5.0, 20.0, 3600.0, 0.1, 100_000)
    assert calm.memory_every_steps < calm.storage_every_steps
    stormy = choose(0.1, 0.01, 1.0, 5.0, 20.0, 60.0, 0.1, 100_000)
    assert stormy.memory_every_steps <= calm.memory_every_steps
    assert stormy.storage_every_steps < calm.storage_every_steps
    assert 0.0 < stormy.efficiency < calm.efficiency < 1.0
