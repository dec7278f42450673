"""runtime/hosts.py: hostfiles, exclusion lists (both forms), select_hosts. One rule per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.errors import SpecError
from llmscale.runtime.hosts import (
    Exclusion,
    Host,
    parse_exclusions,
    parse_hostfile,
    read_exclusions,
    select_hosts,
    write_exclusions,
)


def test_hostfile_reads_slots_comments_and_blank_lines() -> None:
    hosts = parse_hostfile("# rack 1\nnode-a slots=8\n\nnode-b   # spare\n10.0.0.3 slots=2\n")
    assert hosts == [Host("node-a", 8), Host("node-b", None), Host("10.0.0.3", 2)]


@pytest.mark.parametrize("text, field", [
    ("node-a\nnode-a\n", "host"),          # named twice: which slots count?
    ("node-a slots=0\n", "slots"),         # a host that takes no process
    ("node-a gpus=8\n", "hostfile entry"),  # not a hostfile key
    ("node a,b\n", "hostfile entry"),      # a comma list is not a hostfile
    ("node[1-3]\n", "host"),               # hostlist ranges are not expanded
])
def test_hostfile_refuses_bad_lines(text: str, field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_hostfile(text)
    assert info.value.field == field and "hostfile line" in str(info.value)


def test_exclusions_round_trip_in_both_forms(tmp_path: Path) -> None:
    wanted = [Exclusion("node-b", "rank 1 at 0.21 x median"), Exclusion("node-d", "")]
    path, slurm = write_exclusions(tmp_path / "exclude.txt", wanted, header="bench links 2026-01-01")
    assert read_exclusions(path) == [Exclusion("node-b", "rank 1 at 0.21 x median"),
                                     Exclusion("node-d", "(no reason given)")]
    assert slurm.read_text() == "--exclude=node-b,node-d\n"
    assert [e.host for e in read_exclusions(slurm)] == ["node-b", "node-d"]


def test_exclusions_accept_slurm_short_flag_and_plain_lists() -> None:
    assert [e.host for e in parse_exclusions("-x n1,n2\nn3\n")] == ["n1", "n2", "n3"]


def test_empty_exclusion_list_overwrites_a_stale_one(tmp_path: Path) -> None:
    path = tmp_path / "x"
    write_exclusions(path, [Exclusion("old", "stale")])
    write_exclusions(path, [])
    assert read_exclusions(path) == [] and (tmp_path / "x.slurm").read_text() == ""


def test_select_hosts_keeps_order_and_reports_unknown_exclusions() -> None:
    hosts = [Host("a"), Host("b", 4), Host("c")]
    chosen = select_hosts(hosts, [Exclusion("b", "slow"), Exclusion("zz", "not ours")])
    assert chosen.kept == (Host("a"), Host("c"))
    assert chosen.excluded == (Exclusion("b", "slow"),)
    assert chosen.unknown == ("zz",)
    assert "not in the job, ignored: zz" in chosen.summary()
