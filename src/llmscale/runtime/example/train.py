"""Train the example GPT under the runtime: `python -m llmscale.runtime.example.train` (under `llmscale launch`, or
alone with `--run-dir DIR [--config RUN.yaml]`; torchrun's variables make it one rank of many).

Deterministic on CPU: fixed seeds, `torch.use_deterministic_algorithms(True)`, one intra-op thread per rank, the
gradients all-reduced explicitly after backward (one flat buffer, SUM then divide; no DDP overlap, so the all-reduce
is exposed and timed as `comm`, and the wait at the barrier before it as `idle`). A resumed run therefore draws the
same batches and reaches the same losses, bit for bit, as an uninterrupted one.

`--kill-at-step N` sends SIGKILL to this process at the end of step N (after its saves finished): a crash for
tests.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from llmscale.errors import LlmscaleError
from llmscale.runtime.config import RunConfig, load_config
from llmscale.runtime.entry import run
from llmscale.runtime.example.data import CharBatches, Vocab, corpus_text
from llmscale.runtime.example.model import GPT, num_params
from llmscale.runtime.session import Context, Session, init_distributed


def lr_factor(config: RunConfig, step: int) -> float:
    """Linear warmup, then cosine / linear decay to min_lr_ratio, or constant (LambdaLR's factor at `step`)."""
    sched = config.schedule
    if step < sched.warmup_steps:
        return (step + 1) / sched.warmup_steps
    if sched.decay == "constant":
        return 1.0
    done = (step - sched.warmup_steps) / max(sched.total_steps - sched.warmup_steps, 1)
    shape = 0.5 * (1.0 + math.cos(math.pi * min(done, 1.0))) if sched.decay == "cosine" else 1.0 - min(done, 1.0)
    return sched.min_lr_ratio + (1.0 - sched.min_lr_ratio) * shape


def build(config: RunConfig, ctx: Context) -> tuple[GPT, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR,
                                                    CharBatches]:
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    dims = config.example_model
    text = corpus_text(config.data.path)
    vocab = Vocab.of(text)
    if dims.vocab_size is not None and dims.vocab_size < len(vocab.chars):
        raise LlmscaleError(f"model.vocab_size = {dims.vocab_size} is invalid: the text has {len(vocab.chars)} "
                            "distinct characters")
    model = GPT(dims, dims.vocab_size or len(vocab.chars)).to(ctx.device)
    opt = config.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(config, step))
    loader = CharBatches(vocab.encode(text), dims.seq_len, config.batch.micro_batch_size, config.seed, ctx.rank,
                         ctx.world_size, ctx.device)
    return model, optimizer, scheduler, loader


def all_reduce_grads(model: GPT, world: int) -> None:
    """Average the gradients over the ranks: one flat buffer, SUM, divide (deterministic for a fixed world)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def train(config: RunConfig, ctx: Context, run_dir: Path | None, kill_at: int | None) -> None:
    torch.use_deterministic_algorithms(True)
    if ctx.world_size != config.layout.dp:
        raise LlmscaleError(f"layout.dp = {config.layout.dp} is invalid: this run has {ctx.world_size} rank(s)")
    model, optimizer, scheduler, loader = build(config, ctx)
    accum, world = config.grad_accum_steps, ctx.world_size
    autocast = torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")
    tokens_per_step = config.batch.global_batch_size * config.example_model.seq_len
    start = time.perf_counter()
    with Session.from_env(model, optimizer, scheduler, loader, ctx, run_dir=run_dir, config=config) as rt:
        first = rt.step
        if ctx.rank == 0:
            print(f"# {num_params(model):,} parameters, {world} rank(s), resuming after step {first}", flush=True)
        for step in rt.steps():
            loss_sum = 0.0
            for _ in range(accum):
                with rt.phase("data"):
                    x, y = next(loader)
                with rt.phase("compute"), autocast:
                    loss = model(x, y) / accum
                    loss.backward()
                loss_sum += float(loss.detach())
            if world > 1:
                with rt.phase("idle"):
                    dist.barrier()
                with rt.phase("comm"):
                    all_reduce_grads(model, world)
            with rt.phase("compute"):
                if config.optimizer.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            rt.end_step(loss=loss_sum, tokens=tokens_per_step)
            if ctx.rank == 0 and (step % 50 == 0 or step == config.schedule.total_steps):
                print(f"step {step:6d}  loss {loss_sum:.4f}", flush=True)
            if kill_at is not None and step == kill_at:
                rt.wait_for_saves()  # the saves up to this step committed: a test knows which checkpoints exist
                os.kill(os.getpid(), signal.SIGKILL)
    if ctx.rank == 0:
        print(f"# steps {first + 1}..{config.schedule.total_steps} in {time.perf_counter() - start:.1f} s",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmscale.runtime.example.train", description=__doc__)
    parser.add_argument("--run-dir", type=Path, help="run directory when LLMSCALE_RUN_DIR is not set")
    parser.add_argument("--config", type=Path, help="run YAML when LLMSCALE_CONFIG is not set "
                        "(default: the run dir's config.yaml, else the shipped example run.yaml)")
    parser.add_argument("--kill-at-step", type=int, default=None, help="SIGKILL this process after step N (tests)")
    args = parser.parse_args(argv)

    def go() -> None:
        given = args.config or (Path(os.environ["LLMSCALE_CONFIG"]) if "LLMSCALE_CONFIG" in os.environ else None)
        if given is None and args.run_dir is not None and (args.run_dir / "config.yaml").is_file():
            given = args.run_dir / "config.yaml"
        path = given or Path(str(resources.files("llmscale.runtime.example").joinpath("run.yaml")))
        train(load_config(path), init_distributed(), args.run_dir, args.kill_at_step)

    return run(go)  # a refused input: one `error:` line, exit 2 (the launcher does not retry it)


if __name__ == "__main__":
    sys.exit(main())
