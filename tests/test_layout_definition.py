"""One layout definition: every layout field is declared once (specs.layout.Layout with its Knob) and the array
struct, the CLI flags, the JSON documents, the texts and the export coverage read it from there. A field added to
the definition reaches all of them; a per-distinct-row formula cannot read a column outside its key."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import numpy as np
import pytest
import typer
from pydantic import Field, PositiveInt
from typer.testing import CliRunner

from llmscale.cli.main import app
from llmscale.cli.options import JobFlags, with_job_flags
from llmscale.cost.step import LAYER_COLUMNS, MICROBATCH_COLUMNS, PATH_COLUMNS, estimate_step
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.io.resolve import JobRequest, resolve
from llmscale.launch.megatron import LAYOUT_FLAGS, MEGATRON_FLAGS, megatron_notes
from llmscale.launch.torchtitan import LAYOUT_KEYS, TORCHTITAN_KEYS, torchtitan_notes
from llmscale.layout.arrays import Layouts, reads, reads_of
from llmscale.layout.space import SpaceOptions, generate
from llmscale.report.text import layout_line, layout_text
from llmscale.specs.layout import LAYOUT_FIELDS, Knob, Layout, RankOrder, Show, spec_fields
from llmscale.specs.train import TrainSpec


class Extended(Layout):
    """The layout with two fields more, declared the way every field is: the test of "declared once"."""

    chunks: Annotated[PositiveInt, Knob("chunks", Show.ALWAYS)] = Field(1, description="test field: chunks")
    turbo: Annotated[bool, Knob("turbo")] = Field(False, description="test switch: turbo")


def test_a_new_field_reaches_the_cli_the_arrays_the_json_and_the_text() -> None:
    seen: dict[str, Any] = {}

    def command(job: JobFlags) -> None:
        seen.update(job.layout)

    cli = typer.Typer()
    cli.command()(with_job_flags(command, Extended))
    result = CliRunner().invoke(cli, ["--tp", "2", "--chunks", "3", "--turbo"])
    assert result.exit_code == 0, result.output
    assert seen == {"tp": 2, "chunks": 3, "turbo": True}  # the flags exist, parsed into the layout given
    assert "--chunks" in CliRunner().invoke(cli, ["--help"]).output

    lay = Layouts.from_layout(Extended(**seen), num_gpus=8)
    assert lay.chunks.tolist() == [3] and lay.turbo.tolist() == [True]  # a column of the array struct
    row = lay.row(0)
    assert isinstance(row, Extended) and row.chunks == 3
    document = json.loads(json.dumps(row.model_dump(mode="json")))
    assert document["chunks"] == 3 and document["turbo"] is True  # in the JSON documents' layout
    assert "chunks3" in layout_text(row).split() and "turbo" in layout_text(row).split()
    assert "chunks 3" in layout_line(row) and "turbo on" in layout_line(row)


def test_every_job_command_takes_every_layout_field_as_a_flag() -> None:
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    for name in ("memory", "explain", "export"):
        flags = {opt for param in command.commands[name].params for opt in param.opts}
        assert {f.knob.cli_flag(f.name) for f in LAYOUT_FIELDS} <= flags, name


def test_every_layout_field_is_exported_or_noted() -> None:
    # A new field must say how each framework gets it (its flags or keys, or () and a note): never dropped silently.
    names = {f.name for f in LAYOUT_FIELDS}
    assert set(LAYOUT_FLAGS) == names and set(LAYOUT_KEYS) == names
    assert all(flag in MEGATRON_FLAGS for flags in LAYOUT_FLAGS.values() for flag in flags)
    assert all(key in TORCHTITAN_KEYS for keys in LAYOUT_KEYS.values() for key in keys)


# A value off each `()` field's default, on jobs the frameworks can otherwise express: the note must name it.
_GPT3 = {"model": "gpt3-175b", "cluster": "selene", "train": {"global_batch": 1536, "seq_len": 2048}}
_OFF_DEFAULT: dict[str, JobRequest] = {
    "dp": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24}),
    "schedule": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "schedule": "zbv"}),
    "offload_params": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "offload_params": True, "zero": 3}),
    "rank_order": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "rank_order": "tp-cp-ep-pp-dp"}),
    "sp": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "sp": False}),
    # torchtitan has no expert-TP degree: etp 2 (= tp) must be named.
    "etp": JobRequest(model="mixtral-8x22b", cluster="eos-h100", train={"global_batch": 512},
                      layout={"tp": 2, "pp": 4, "dp": 32, "ep": 8}),
    "ep_comm_overlap": JobRequest(model="mixtral-8x22b", cluster="eos-h100",
                                  train={"global_batch": 512, "moe_dispatcher": "alltoall"},
                                  layout={"tp": 2, "pp": 4, "vpp": 2, "dp": 32, "ep": 8, "ep_comm_overlap": True}),
    "offload_activations": JobRequest(model="llama3-8b", cluster="eos-h100", train={"global_batch": 64},
                                      layout={"dp": 64, "offload_activations": 8}),
    "cuda_graphs": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "cuda_graphs": True}),
    "recompute_norm": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "recompute_norm": True}),
    "recompute_mlp": JobRequest(**_GPT3, layout={"tp": 8, "pp": 8, "dp": 24, "recompute_mlp": True}),
    "recompute_mla_up": JobRequest(model="deepseek-v3", cluster="deepseek-v3-h800", train={"global_batch": 15360},
                                   layout={"pp": 16, "dp": 128, "ep": 64, "recompute_mla_up": True}),
    "recompute_moe_act": JobRequest(model="mixtral-8x22b", cluster="eos-h100", train={"global_batch": 512},
                                    layout={"tp": 2, "pp": 4, "dp": 32, "ep": 8, "recompute_moe_act": True}),
}


@pytest.mark.parametrize(("fields", "notes_of"), [(LAYOUT_FLAGS, megatron_notes), (LAYOUT_KEYS, torchtitan_notes)])
def test_a_field_without_flags_is_named_in_a_note(fields: dict[str, tuple[str, ...]], notes_of: Any) -> None:
    for name in (name for name, names in fields.items() if not names):
        notes = notes_of(resolve(_OFF_DEFAULT[name]))  # a new ()-field needs a row in _OFF_DEFAULT
        assert any(re.search(rf"\b{name}\b", note) for note in notes), (name, notes)


def test_the_array_struct_has_a_column_per_field_and_nothing_else() -> None:
    lay = Layouts.from_columns(tp=2, pp=4, dp=8, vpp=2)
    assert lay.names == tuple(f.name for f in LAYOUT_FIELDS)
    # Derived fields follow their declared rule: etp = tp, sp = tp > 1, interleaved when vpp > 1.
    assert (lay.etp[0], bool(lay.sp[0]), lay.row(0).schedule.value) == (2, True, "interleaved")
    assert Layouts.from_columns(num_gpus=64, tp=2, pp=4).dp.tolist() == [8]
    with pytest.raises(AttributeError, match="no column 'tpp'"):
        _ = lay.tpp
    # No field may shadow an attribute of the struct (a property such as num_gpus, a method such as row).
    assert not {f.name for f in LAYOUT_FIELDS} & set(dir(Layouts))


def test_a_distinct_row_view_refuses_columns_outside_its_key() -> None:
    lay = Layouts.from_columns(tp=[1, 2, 2], dp=[4, 2, 2], zero=[0, 1, 2])
    rows, view = lay.distinct_view("tp", "dp")
    assert view.size == 2 and view.tp.tolist() == [1, 2]
    with pytest.raises(AttributeError, match="outside this view"):
        _ = view.zero  # a formula keyed on (tp, dp) that read zero would be spread to rows with other zero stages
    assert rows.spread(view.tp * 10).tolist() == [10, 20, 20]


def test_the_cost_model_reads_only_its_keys_on_a_space_that_takes_every_branch() -> None:
    # Every schedule, ZeRO stage, recompute mode and both rank orders, dense and MoE: each per-distinct-row formula
    # runs on a view of its key's columns, so a read outside its key would raise here.
    options = SpaceOptions(zero=(0, 1, 2, 3), rank_orders=tuple(RankOrder), offload_optimizer=(False, True))
    for name, cluster, gpus, batch in (("llama3-70b", "eos-h100", 512, 1024), ("mixtral-8x22b", "eos-h100", 256, 512)):
        model, train = load_model(name), TrainSpec(global_batch=batch)
        space = generate(model, load_cluster(cluster, num_gpus=gpus), train, gpus, options)
        lay = space.layouts
        flipped = lay.replace(tp_comm_overlap=~lay.tp_comm_overlap, ep_comm_overlap=~lay.ep_comm_overlap)
        for batch_of_layouts in (lay, flipped):
            step = estimate_step(model, load_cluster(cluster, num_gpus=gpus), train, batch_of_layouts,
                                 load_constants())
            assert np.all(np.isfinite(step.step_time_s))


def test_the_definition_declares_a_knob_for_every_field() -> None:
    assert [f.name for f in spec_fields(Layout)] == list(Layout.model_fields)
    with pytest.raises(TypeError, match="declares no Knob"):
        class Bare(Layout):
            bare: int = 1

        spec_fields(Bare)


def test_a_formula_declares_the_columns_it_reads_and_the_keys_unite_them() -> None:
    @reads("pp", "tp")
    def formula(lay: Layouts) -> np.ndarray:
        return lay.tp * lay.pp

    assert reads_of(formula, ("cp", "tp")) == ("tp", "pp", "cp")  # the layout's field order, each once
    with pytest.raises(ValueError, match="not layout columns: \\['tpp'\\]"):
        reads("tpp")
    # The step model's micro-batch key holds its layer key, and the path key both (cost.step).
    assert set(LAYER_COLUMNS) <= set(MICROBATCH_COLUMNS) <= set(PATH_COLUMNS)
    assert {"zero", "offload_optimizer", "offload_params"}.isdisjoint(PATH_COLUMNS)
