"""`llmscale profile RUN_DIR`: measured step parts per rank beside the predicted breakdown (monitor/profile.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.cli import options as o
from llmscale.report.strict_json import strict_dumps


def profile_cmd(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (llmscale launch --run-dir)")],
    every: Annotated[int, typer.Option("--every", help="name the slowest rank every N steps")] = 10,
    predict: Annotated[bool, typer.Option("--predict/--no-predict", help="compare with llmscale's prediction "
                                          "(RUN_DIR/prediction.json; made on first use: needs torch, ~1 min)")] = True,
    refresh: Annotated[bool, typer.Option("--refresh-prediction", help="measure the host and predict again")] = False,
    as_json: o.JsonOpt = False,
) -> None:
    """Per step and rank: data / compute / comm / checkpoint / idle, measured vs predicted, slowest rank and lag."""
    o.within("--every", every, 1, 1e9)
    from llmscale.monitor.predict import predict as make_prediction
    from llmscale.monitor.profile import profile, profile_text
    from llmscale.monitor.rundir import read_run

    snap = read_run(run_dir)
    prediction = make_prediction(run_dir, refresh=refresh) if predict else None
    result = profile(snap, prediction, every)
    typer.echo(strict_dumps(result.as_dict()) if as_json else profile_text(result))
