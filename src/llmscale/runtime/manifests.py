"""The storage tier's directories on disk: which are committed, their verification, re-saves and quarantine. A
directory is committed when its `manifest.json` parses and names its step, whatever its name; no save writes into a
committed directory. torch-free (the supervisor's reconciliation and the chaos verifier read them too).
The directory names and why: docs/runtime.md#runtime-manifests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.runtime.files import sha256_file, step_dir_name

MANIFEST = "manifest.json"
QUARANTINE = "quarantine"
_NAME = re.compile(r"^step_(\d{8})(?:\.(saving|replaced)-([A-Za-z0-9_-]+))?$")


@dataclass(frozen=True)
class Commit:
    """One committed checkpoint directory."""

    step: int
    path: Path
    manifest: dict[str, Any]

    @property
    def time_unix(self) -> float:
        value = self.manifest.get("time_unix", 0.0)
        return float(value) if isinstance(value, int | float) else 0.0


@dataclass(frozen=True)
class Unreadable:
    """A step directory whose manifest exists but does not parse (a torn or corrupted write)."""

    path: Path
    reason: str


def step_of(name: str) -> int | None:
    """The step a checkpoint directory's name stands for (any of the names above), None for another name."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def staging_name(step: int, tag: str) -> str:
    return f"{step_dir_name(step)}.saving-{tag}"


def scan(root: Path) -> tuple[list[Commit], list[Unreadable]]:
    """Every committed directory under `root`, newest step first (of one step: the canonical name first, then the
    newest manifest), and every directory whose manifest is there but unreadable."""
    found, bad = [], []
    for path in root.glob("step_*"):
        if not path.is_dir() or step_of(path.name) is None or not (path / MANIFEST).exists():
            continue
        try:
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
            found.append(Commit(int(manifest["step"]), path, manifest))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            bad.append(Unreadable(path, f"{MANIFEST} unreadable ({type(exc).__name__}: {str(exc)[:120]})"))
    found.sort(key=lambda c: (c.step, c.path.name == step_dir_name(c.step), c.time_unix), reverse=True)
    return found, sorted(bad, key=lambda u: u.path.name)


def committed(root: Path) -> list[Commit]:
    return scan(root)[0]


def partials(root: Path) -> list[Path]:
    """Step directories with no manifest: a save cut short (never loaded)."""
    return sorted(p for p in root.glob("step_*") if p.is_dir() and step_of(p.name) is not None
                  and not (p / MANIFEST).exists())


def verify(path: Path, manifest: dict[str, Any]) -> str:
    """'' when every file the manifest lists is there with its SHA256, else the first problem."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    for name, digest in sorted(files.items()):
        try:
            if sha256_file(path / name) != digest:
                return f"{name}: SHA256 differs from the manifest"
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
    return ""


def checkpoint_files(directory: Path) -> dict[str, str]:
    """name → SHA256 of every file a save wrote (not the manifest itself, nor a temporary file)."""
    return {p.name: sha256_file(p) for p in sorted(directory.iterdir())
            if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")}


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (POSIX: the directory entry lives in the parent's data)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def place(root: Path, staging: Path, step: int, tag: str) -> Path:
    """Give a committed staging directory its step's name: the older commit of that step (if any) is moved aside,
    the new one renamed in, the old one deleted. Every moment, step N has a committed directory on disk."""
    final = root / step_dir_name(step)
    aside = root / f"{step_dir_name(step)}.replaced-{tag}"
    if final.exists():
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(final, aside)
    os.rename(staging, final)
    fsync_dir(root)
    shutil.rmtree(aside, ignore_errors=True)
    for other in committed(root):  # copies of this step left by a commit cut short: replaced too
        if other.step == step and other.path != final:
            shutil.rmtree(other.path, ignore_errors=True)
    return final


def quarantine(root: Path, path: Path) -> Path | None:
    """Move an unloadable checkpoint out of the step directories (module docstring); None when it cannot move."""
    target = root / QUARANTINE / path.name
    try:
        target.parent.mkdir(exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(path, target)
    except OSError:
        return None
    return target


def prune(root: Path, keep: int, just_committed: int) -> None:
    """Keep the newest `keep` committed steps (every directory of each); delete older commits, partial directories
    older than the oldest kept, and quarantined checkpoints of steps up to the one just committed."""
    done = committed(root)
    steps = sorted({c.step for c in done}, reverse=True)
    kept = set(steps[:keep])
    for c in done:
        if c.step not in kept:
            shutil.rmtree(c.path, ignore_errors=True)
    oldest = min(kept) if kept else just_committed
    for path in partials(root):
        if (step_of(path.name) or 0) < oldest:
            shutil.rmtree(path, ignore_errors=True)
    for path in (root / QUARANTINE).glob("step_*"):
        step = step_of(path.name)
        if step is not None and step <= just_committed:
            shutil.rmtree(path, ignore_errors=True)
