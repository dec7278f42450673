"""`llmscale dashboard RUN_DIR`: serve the run's live page on a local port (monitor/dashboard)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer


def dashboard_cmd(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (llmscale launch --run-dir)")],
    port: Annotated[int, typer.Option("--port", help="TCP port (0: a free one)")] = 8050,
    host: Annotated[str, typer.Option("--host", help="address to listen on (loopback by default)")] = "127.0.0.1",
    predict: Annotated[bool, typer.Option("--predict/--no-predict", help="make RUN_DIR/prediction.json in the "
                                          "background when missing (needs torch, ~1 min)")] = True,
) -> None:
    """A local page (no internet) refreshing as the run goes: loss, throughput, measured vs predicted, heat map,
    checkpoint and failure timeline. Ctrl-C stops it."""
    from llmscale.cli import options as o
    from llmscale.monitor.dashboard import start

    o.within("--port", port, 0, 65535)
    board = start(run_dir, port, host, predict)
    typer.echo(f"llmscale dashboard of {run_dir} at {board.url} (Ctrl-C stops)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        board.close()
