"""A training script's entry point under `llmscale launch`: its exception reaches the journal, a refused input is one
line and exit 2. torch-free (the process group is destroyed only when torch.distributed was imported).

torch's elastic agent reports a failed worker by the message in its error file (`TORCHELASTIC_ERROR_FILE`, one per
worker; torch/distributed/elastic/multiprocessing/errors/__init__.py `ProcessFailure`), else with a placeholder
("To enable traceback see: …"). `record_error` writes the exception's first line there, in the plain form that
ProcessFailure reads (`{"message": str, "timestamp": int}`); the Session does it for an exception leaving its
`with` block, `run` for one leaving the whole entry point.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from llmscale.errors import LlmscaleError
from llmscale.runtime.files import write_atomic

ENV_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
REFUSED_EXIT = 2
"""A refused input (LlmscaleError): the launcher stops the job instead of retrying it (supervisor.py)."""


def record_error(exc: BaseException) -> None:
    """Hand `exc`'s first line to the elastic agent (module docstring); the first record of a process wins."""
    path = os.environ.get(ENV_ERROR_FILE)
    if not path or os.path.exists(path):
        return
    lines = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:1000]
    record = json.dumps({"message": message, "timestamp": int(time.time())}).encode()
    # atomically: the agent reads every rank's file once one rank dies, and a file caught empty raised JSONDecodeError
    with contextlib.suppress(OSError):
        write_atomic(Path(path), record, durable=False)


def run(main: Callable[[], object]) -> int:
    """Run a training entry point: 0 when it returns; a LlmscaleError (an input the runtime refused) is one
    `error:` line and REFUSED_EXIT; any other exception is recorded for the launcher and re-raised. The default
    process group is destroyed either way."""
    try:
        main()
    except LlmscaleError as exc:
        record_error(exc)
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED_EXIT
    except Exception as exc:
        record_error(exc)
        raise
    finally:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0
