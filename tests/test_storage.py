"""`llmscale bench storage` (measure/storage.py) and its calibration-profile section feeding the checkpoint model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.cost.calibrate import calibrated_cluster
from llmscale.errors import SpecError
from llmscale.io.calibration import load_profile, write_profile
from llmscale.io.catalog import load_cluster, load_constants
from llmscale.measure.storage import bench_storage
from llmscale.specs.calibration import CalibrationProfile, DeviceInfo, StorageCalibration, Versions
from llmscale.units import GB, KIB
from tests.conftest import run_cli


def test_bench_measures_and_leaves_nothing_behind(tmp_path: Path) -> None:
    result = bench_storage(tmp_path, [64 * KIB, 256 * KIB], repeats=1, small_files=8, small_file_bytes=KIB,
                           fsync_reps=3)
    assert [r.size_bytes for r in result.shards] == [64 * KIB, 256 * KIB]
    assert all(r.write_s > 0 and r.read_s > 0 and 0 <= r.fsync_s <= r.write_s for r in result.shards)
    assert result.small.files == 8 and result.small.read_s > 0 and result.fsync_median_s > 0
    assert list(tmp_path.iterdir()) == []  # the work directory is removed


@pytest.mark.parametrize("kwargs, field", [({"sizes": [0]}, "sizes"), ({"repeats": 0}, "repeats"),
                                           ({"small_files": 0}, "small_files"), ({"fsync_reps": 0}, "fsync_reps")])
def test_bad_settings_are_refused_before_writing(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        bench_storage(tmp_path, **kwargs)
    assert info.value.field == field and list(tmp_path.iterdir()) == []


def test_cli_missing_directory_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "bench", "storage", str(tmp_path / "nope"))
    assert code == 2 and err.startswith("error:") and "not a directory" in err and len(err.splitlines()) == 1


def _profile(write_bytes_per_s: float, cache_dropped: bool = True) -> CalibrationProfile:
    return CalibrationProfile(
        device=DeviceInfo(kind="cpu", name="storage bench on test", ranks=1), date="2026-01-01",
        versions=Versions(llmscale="t", torch="t", python="t"),
        storage=StorageCalibration(path="/x", host="h", write_bytes_per_s=write_bytes_per_s,
                                   read_bytes_per_s=2 * write_bytes_per_s, shard_bytes=2**26, fsync_s=1e-3,
                                   small_files_per_s=1e4, small_file_bytes=16384, cache_dropped=cache_dropped))


def test_profile_with_storage_is_sealed_and_applied_per_node(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    write_profile(_profile(0.5 * GB), path)
    profile = load_profile(path)  # refused if the seal did not cover the storage section
    assert profile.sealed and profile.storage is not None
    cluster = load_cluster("eos-h100")
    nodes = cluster.num_gpus // cluster.node.gpus_per_node
    applied = calibrated_cluster(cluster, profile, load_constants().comm)
    assert applied.storage is not None
    # every node writes at the one node's measured 0.5 GB/s (capped by a catalog aggregate, if the cluster has one)
    expected = 0.5 * nodes if cluster.storage is None else min(0.5 * nodes, cluster.storage.write_gb_per_s)
    assert applied.storage.write_gb_per_s == pytest.approx(expected)


def test_editing_the_storage_section_breaks_the_seal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    write_profile(_profile(0.5 * GB), path)
    path.write_text(path.read_text().replace("write_bytes_per_s: 500000000.0", "write_bytes_per_s: 900000000.0"))
    code, _, err = run_cli(capsys, "goodput", "--trials", "0", "--calibration", str(path))
    assert code == 2 and "does not match" in err


def test_slower_measured_storage_lengthens_the_storage_interval(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Young/Daly: the optimal interval grows with the checkpoint's cost, so a slower measured write must lengthen
    the storage interval of the async policy (the blocking write is the cost there)."""
    slow, fast = tmp_path / "slow.yaml", tmp_path / "fast.yaml"
    write_profile(_profile(0.01 * GB), slow)
    write_profile(_profile(5.0 * GB), fast)
    intervals = {}
    for name, path in (("slow", slow), ("fast", fast)):
        code, out, err = run_cli(capsys, "goodput", "--cluster", "eos-h100", "--model", "llama3-8b", "--trials", "0",
                                 "--json", "--calibration", str(path))
        assert code == 0, err
        intervals[name] = json.loads(out)["policies"]["sync"]["checkpoint_interval_min"]["storage"]
    assert intervals["slow"] > intervals["fast"]


def test_cli_writes_a_profile_goodput_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "storage.yaml"
    code, out, err = run_cli(capsys, "bench", "storage", str(tmp_path), "--sizes", "256K", "--repeats", "1",
                             "--small-files", "4", "--fsync-reps", "2", "--profile-out", str(profile), "--json")
    assert code == 0, err
    assert json.loads(out)["profile"]["sha256"] == load_profile(profile).sha256
    assert run_cli(capsys, "goodput", "--trials", "0", "--calibration", str(profile))[0] == 0
