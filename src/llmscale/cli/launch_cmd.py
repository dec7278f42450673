"""`llmscale launch RUN.yaml [--run-dir DIR] [--allow-config-change] [--exclude-from FILE] [--metrics-port P]
[--hostfile FILE] [--node-exec TEMPLATE] -- TRAIN.py [args...]`: run a training script under the supervisor
(runtime/supervisor.py) — torch's elastic agent (one torchrun per node across hosts, runtime/multinode.py), a fresh
rendezvous per attempt, restarts on exits and hangs, the fault journal. `llmscale launch --example [--run-dir DIR]`
runs the packaged example (llmscale/runtime/example/run.yaml and train.py of the installed package, so it works
from any directory). One launcher per run directory (runtime/runlock.py); SIGINT, SIGTERM or SIGHUP stop the run with
one line and exit 130 (runtime/interrupt.py). torch is imported by the first attempt, after the run directory's
checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from llmscale.errors import LlmscaleError


def _example() -> tuple[Path, list[str]]:
    """The packaged example's run.yaml and train.py (importlib.resources: the installed package's files)."""
    from importlib import resources

    root = Path(str(resources.files("llmscale.runtime.example")))
    return root / "run.yaml", [str(root / "train.py")]


def _resolve(config: Path | None, train: list[str] | None, example: bool) -> tuple[Path, list[str]]:
    if example:
        if config is not None or train:
            raise LlmscaleError("--example runs the packaged example: give no RUN.yaml or TRAIN.py with it")
        return _example()
    if config is None or not train:
        raise LlmscaleError("usage: llmscale launch RUN.yaml -- TRAIN.py [args...]  (or: llmscale launch --example)")
    return config, train


def _checked(train: list[str], exclude_from: Path | None, hostfile: Path | None, node_exec: str) -> Path:
    """The training script, once torch and every named file and the node exec template are there (one error line
    each, before the run directory is touched). torch is imported by the first attempt, so a refused launch (the
    lock, the config hash) stays quick."""
    from importlib.util import find_spec

    from llmscale.measure import INSTALL_HINT
    from llmscale.runtime.nodes import parse_node_exec

    if find_spec("torch") is None:
        raise LlmscaleError(f"this command needs torch, which is not installed: {INSTALL_HINT}")
    script = Path(train[0])
    if not script.is_file():
        raise LlmscaleError(f"TRAIN.py = {train[0]!r}: not a file (usage: llmscale launch RUN.yaml -- TRAIN.py ...)")
    if exclude_from is not None and not exclude_from.is_file():
        raise LlmscaleError(f"--exclude-from = {str(exclude_from)!r}: not a file")
    parse_node_exec(node_exec)
    if hostfile is not None and not hostfile.is_file():
        raise LlmscaleError(f"--hostfile = {str(hostfile)!r}: not a file")
    return script


def launch(
    config: Annotated[Path | None, typer.Argument(help="the run YAML", show_default=False)] = None,
    train: Annotated[list[str] | None, typer.Argument(help="-- TRAIN.py [args...]: the training script and its "
                                                      "arguments", show_default=False)] = None,
    example: Annotated[bool, typer.Option("--example", metavar="",
                                          help="run the packaged example GPT (its run.yaml and train.py)")] = False,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", metavar="DIR",
                                                 help="run directory (default: runs/<config name>)")] = None,
    allow_config_change: Annotated[bool, typer.Option("--allow-config-change", metavar="",
                                                      help="resume under a config of another hash; the diff is "
                                                           "journaled")] = False,
    exclude_from: Annotated[Path | None, typer.Option("--exclude-from", metavar="FILE",
                                                      help="an exclusion list (llmscale bench ... --exclude-out)")]
    = None,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", metavar="P", min=0, max=65535,
                                                     help="serve Prometheus metrics of the run on this port")]
    = None,
    hostfile: Annotated[Path | None, typer.Option("--hostfile", metavar="FILE",
                                                  help="hosts of the job (NAME [slots=N] [addr=A] lines); the "
                                                       "config's hosts: must then name the same")] = None,
    node_exec: Annotated[str, typer.Option("--node-exec", metavar="TEMPLATE",
                                           help="how a node's torchrun starts on its host: local, 'ssh {host}', "
                                                "'ip netns exec {host}', 'srun -w {host} -N1 -n1'")] = "local",
) -> None:
    """Launch a training run from one hashed config: restarts on exit or hang, resumes from the newest checkpoint,
    journals every fault (llmscale journal RUN_DIR)."""
    from llmscale.runtime.interrupt import EXIT_CODE
    from llmscale.runtime.supervisor import LaunchRequest
    from llmscale.runtime.supervisor import launch as run_launch

    config, train = _resolve(config, train, example)
    script = _checked(train, exclude_from, hostfile, node_exec)
    if run_dir is None:
        from llmscale.runtime.config import load_config

        run_dir = Path("runs") / load_config(config).name
    server: Callable[[Path, int], object] | None = None
    if metrics_port is not None:
        try:
            from llmscale.monitor.metrics import serve

            server = serve
        except ImportError as exc:
            typer.echo(f"metrics: not served, llmscale.monitor is unavailable ({exc})", err=True)
    outcome = run_launch(LaunchRequest(config, run_dir, script, tuple(train[1:]), allow_config_change, exclude_from,
                                       metrics_port, server, hostfile, node_exec),
                         say=typer.echo)
    if outcome.exit_code == EXIT_CODE:
        typer.echo(f"error: {outcome.reason}", err=True)
    elif not outcome.completed:
        typer.echo(f"error: stopped after {outcome.attempts} attempt(s): {outcome.reason}", err=True)
    raise typer.Exit(outcome.exit_code)
