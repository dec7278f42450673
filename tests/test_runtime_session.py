"""The Session API in this process (a gloo group of one): a loader without state_dict is refused in one line unless
`data.resumable: false`; a run without a scheduler saves and resumes; the run config's `user:` section reaches the
script as written; the converted loop of docs/runtime.md runs as written. The checkpoint writer is this test's
child, stopped at the end; the memory tiers are removed."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from llmscale.errors import LlmscaleError  # noqa: E402
from llmscale.runtime.config import parse_config  # noqa: E402
from llmscale.runtime.files import RunPaths  # noqa: E402
from llmscale.runtime.session import Context, Session  # noqa: E402
from llmscale.runtime.writer import stop_writer  # noqa: E402

USER = {"tokenizer": "bpe-32k", "layers": [4, 8], "warm": {"from": None, "ratio": 0.5}}
CONFIG = {"name": "plain", "schedule": {"warmup_steps": 0, "total_steps": 4},
          "checkpoint": {"memory_every_steps": 1, "storage_every_steps": 2}, "user": USER}


@pytest.fixture
def world_of_one(tmp_path: Path) -> Iterator[Path]:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield tmp_path / "run"
    finally:
        stop_writer()
        dist.destroy_process_group()
        shutil.rmtree(RunPaths(tmp_path / "run").memory_tier(), ignore_errors=True)


def _train(run: Path, config: Any, loader: Any) -> int:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = Context(0, 1, 0, torch.device("cpu"), "here")
    with Session(model, optimizer, None, loader, ctx, run, config) as rt:  # no scheduler
        first = rt.step
        assert rt.user == USER
        for _ in rt.steps():
            loss = model(next(loader)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            rt.end_step(loss=float(loss.detach()), tokens=4)
    return first


def test_a_plain_loader_is_refused_unless_not_resumable_and_no_scheduler_is_needed(world_of_one: Path) -> None:
    plain = iter([torch.ones(2, 3)] * 100)  # a generator-like loader: no state_dict()
    ctx = Context(0, 1, 0, torch.device("cpu"), "here")
    with pytest.raises(LlmscaleError) as refused:
        Session(torch.nn.Linear(3, 1), None, None, plain, ctx, world_of_one, parse_config(CONFIG))
    assert "\n" not in str(refused.value) and "data.resumable: false" in str(refused.value), refused.value
    config = parse_config({**CONFIG, "data": {"resumable": False}})
    assert _train(world_of_one, config, plain) == 0
    config = parse_config({**CONFIG, "data": {"resumable": False}, "schedule": {"warmup_steps": 0, "total_steps": 6}})
    assert _train(world_of_one, config, plain) == 4  # resumed, without a scheduler


def test_a_resume_at_another_world_size_needs_one_global_data_position(world_of_one: Path) -> None:
    # a checkpoint of 2 ranks whose loaders were at different positions: a 1-rank resume cannot tell where the job's
    # data stands, so it is refused in one line (the example's loader keeps a global position: it resumes)
    from llmscale.runtime import state
    from llmscale.runtime.restore import Restorer, _bytes
    from llmscale.runtime.storage import LoadOutcome

    class Positioned:
        def __init__(self) -> None:
            self.position = 0

        def state_dict(self) -> dict[str, int]:
            return {"position": self.position}

        def load_state_dict(self, saved: dict[str, int]) -> None:
            self.position = saved["position"]

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = Context(0, 1, 0, torch.device("cpu"), "here")
    restorer = Restorer(model, optimizer, None, Positioned(), ctx.device, None)
    loaded = restorer._target(ctx, 2)
    assert sorted(k for k in loaded if k.startswith("rank")) == ["rank0", "rank1"]  # rank 0 reads both
    loaded["extra"] = _bytes({"scheduler": None, "step": 8, "world_size": 2})
    for rank, position in ((0, 16), (1, 16)):
        loader = Positioned()
        loader.position = position
        loaded[f"rank{rank}"] = _bytes(state.capture(loader))
    from torch.distributed.checkpoint.state_dict import get_state_dict

    loaded["model"], loaded["optim"] = get_state_dict(model, optimizer)
    restorer._apply_storage(ctx, LoadOutcome(8, world_of_one, 0.0, state=loaded, saved_world=2))
    assert restorer.loader.position == 16
    loader = Positioned()
    loader.position = 9
    loaded["rank1"] = _bytes(state.capture(loader))
    with pytest.raises(LlmscaleError) as refused:
        restorer._apply_storage(ctx, LoadOutcome(8, world_of_one, 0.0, state=loaded, saved_world=2))
    message = str(refused.value)
    assert "\n" not in message and "rank 1: {'position': 9} vs rank 0: {'position': 16}" in message, message


def _block(text: str, marker: str) -> str:
    """The fenced code block after `<!-- marker -->` in a markdown text."""
    after = text.split(f"<!-- {marker} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def test_the_documented_session_loop_runs(tmp_path: Path) -> None:
    # docs/runtime.md's converted loop and run YAML, as written (fewer steps), run as one process
    import subprocess
    import sys

    import yaml

    from llmscale.runtime.manifests import committed

    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "runtime.md").read_text(encoding="utf-8")
    (tmp_path / "train.py").write_text(_block(text, "session-example"), encoding="utf-8")
    config = yaml.safe_load(_block(text, "session-config"))
    config["schedule"]["total_steps"] = config["user"]["steps"] = 6
    config["checkpoint"] = {"memory_every_steps": 2, "storage_every_steps": 3}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "LLMSCALE_RUN_DIR": str(run),
           "LLMSCALE_CONFIG": str(tmp_path / "run.yaml"), "LLMSCALE_ATTEMPT": "0"}
    env.pop("LLMSCALE_PARENT_PID", None)
    try:
        done = subprocess.run([sys.executable, str(tmp_path / "train.py")], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        steps = [json.loads(line)["step"] for line in RunPaths(run).steps(0).read_text().splitlines()]
        assert steps == [1, 2, 3, 4, 5, 6]
        assert [c.step for c in committed(RunPaths(run).checkpoints)] == [6, 3]
    finally:
        shutil.rmtree(RunPaths(run).memory_tier(), ignore_errors=True)
