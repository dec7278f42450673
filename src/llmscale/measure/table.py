"""Text tables as nccl-tests prints them: a `#` preamble (versions, inputs, devices), a header row and a units row
behind `#`, right-aligned fixed-width columns, and a `#` footer (verified results, averages). Rows are the same
dicts the `--json` output carries; a column names its key, so table and JSON cannot drift apart.

Values inside are SI (bytes, seconds, bytes/s, FLOP/s); a column's `scale` turns them into the printed unit.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from llmscale import __version__


@dataclass(frozen=True)
class Column:
    """One fixed-width column: `row[key] / scale` printed with `fmt`."""

    key: str
    header: str
    unit: str = ""
    width: int = 10
    fmt: str = ".2f"
    scale: float = 1.0

    def cell(self, row: dict[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            text = "-"
        elif isinstance(value, str):
            text = value
        elif self.fmt == "d":
            text = f"{int(value):d}"
        else:
            text = format(float(value) / self.scale, self.fmt)
        return text.rjust(self.width)


def render(preamble: Iterable[str], columns: Sequence[Column], rows: Iterable[dict[str, Any]],
           footer: Iterable[str] = ()) -> str:
    """The whole table as text: preamble and footer lines get a leading `# `."""
    lines = [f"# {line}".rstrip() for line in preamble]
    lines.append("#" + " ".join(c.header.rjust(c.width) for c in columns)[1:])
    lines.append("#" + " ".join(c.unit.rjust(c.width) for c in columns)[1:])
    lines += [" ".join(c.cell(row) for c in columns) for row in rows]
    lines += [f"# {line}".rstrip() for line in footer]
    return "\n".join(lines)


def versions() -> dict[str, Any]:
    """llmscale, torch, python, CUDA and NCCL versions (None where absent) and the UTC time, for preambles."""
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    return {"llmscale": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "cuda": torch.version.cuda, "nccl": nccl,
            "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat()}


def version_line(info: dict[str, Any]) -> str:
    extra = "".join(f" {k} {info[k]}" for k in ("cuda", "nccl") if info.get(k))
    return f"llmscale {info['llmscale']}  torch {info['torch']}  python {info['python']}{extra}  {info['date']}"


def device_name(device: str) -> str:
    """A readable name of 'cpu' or 'cuda:N' (the CPU model from /proc/cpuinfo where Linux has one)."""
    import torch

    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return f"cpu {model} ({os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads)"
