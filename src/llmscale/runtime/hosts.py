"""Hostfiles and exclusion lists: which machines a job may run on, and which a health sweep says to leave out.
Hostfile: `NAME [slots=N] [addr=A]` per line (the OpenMPI / DeepSpeed form); exclusion list: FILE (hostfile form,
`# reason` lines) and FILE.slurm (`--exclude=h1,h2`). Torch-free.
Formats and sources: docs/runtime.md#runtime-hosts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from llmscale.errors import InputFileError, SpecError

MAX_HOSTS = 1_000_000
"""More hosts than the largest clusters llmscale plans (500k GPUs at 1+ GPU per host)."""
MAX_SLOTS = 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}")
"""A host name or address: letters, digits, `.`, `_`, `:` (IPv6), `-`; no spaces, commas or brackets."""


@dataclass(frozen=True)
class Host:
    """One machine of a hostfile."""

    name: str
    slots: int | None = None
    """Processes it takes (`slots=N`); None: the launcher's --nproc-per-node."""
    addr: str | None = None
    """Where other hosts reach it (`addr=A`); None: the name."""

    @property
    def address(self) -> str:
        return self.addr or self.name


@dataclass(frozen=True)
class Exclusion:
    """A host to leave out, and why."""

    host: str
    reason: str = ""


@dataclass(frozen=True)
class HostSelection:
    """The hosts a job keeps after an exclusion list; `unknown` names excluded hosts the job did not have (reported,
    never silently dropped)."""

    kept: tuple[Host, ...]
    excluded: tuple[Exclusion, ...]
    unknown: tuple[str, ...] = field(default=())

    @property
    def kept_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.kept)

    def summary(self) -> str:
        """One line: kept / excluded / unknown."""
        line = (f"hosts: {len(self.kept)} kept ({', '.join(self.kept_names) or 'none'}), {len(self.excluded)} "
                f"excluded ({', '.join(e.host for e in self.excluded) or 'none'})")
        return line + (f"; not in the job, ignored: {', '.join(self.unknown)}" if self.unknown else "")


def check_name(name: str, where: str) -> str:
    if not _NAME.fullmatch(name):
        raise SpecError("host", name, "a host name or address (letters, digits, '.', '_', ':', '-')", where=where)
    return name


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None


def parse_hostfile(text: str, where: str = "hostfile") -> list[Host]:
    """Hosts of a hostfile's text (module docstring), in file order."""
    hosts: list[Host] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *rest = line.split()
        here = f"{where} line {number}"
        check_name(name, here)
        slots, addr = _entry_fields(rest, here)
        if name in seen:
            raise SpecError("host", name, "each host once (it is named again)", where=here)
        seen.add(name)
        hosts.append(Host(name, slots, addr))
    if len(hosts) > MAX_HOSTS:
        raise SpecError("hosts", len(hosts), f"at most {MAX_HOSTS:,}", where=where)
    return hosts


def _entry_fields(items: list[str], where: str) -> tuple[int | None, str | None]:
    """(slots, addr) of the `key=value` items after a hostfile line's host name."""
    slots, addr = None, None
    for item in items:
        if match := re.fullmatch(r"(?:slots|max_slots)=(\d+)", item):
            slots = int(match.group(1))
            if not 1 <= slots <= MAX_SLOTS:
                raise SpecError("slots", slots, f"an integer in 1..{MAX_SLOTS}", where=where)
        elif item.startswith("addr="):
            addr = check_name(item[5:], where)
        else:
            raise SpecError("hostfile entry", item, "slots=N (N in 1..1024) or addr=ADDRESS after the host name",
                            where=where)
    return slots, addr


def read_hostfile(path: Path) -> list[Host]:
    return parse_hostfile(_read_text(path), where=str(path))


def parse_exclusions(text: str, where: str = "exclusion list") -> list[Exclusion]:
    """Excluded hosts of either form (module docstring), each with the `# reason` line above it if any."""
    found: dict[str, Exclusion] = {}
    reason = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#"):
            reason = line[1:].strip()
            continue
        line = re.sub(r"^(--exclude=|-x\s+)", "", line)
        for name in (n.strip() for n in line.split(",")):
            if name:
                check_name(name, f"{where} line {number}")
                found.setdefault(name, Exclusion(name, reason))
        if line:
            reason = ""
    return list(found.values())


def read_exclusions(path: Path) -> list[Exclusion]:
    return parse_exclusions(_read_text(path), where=str(path))


def write_exclusions(path: Path, exclusions: list[Exclusion], header: str = "") -> tuple[Path, Path]:
    """Write FILE (hostfile form) and FILE.slurm (module docstring), each atomically (tmp + os.replace). An empty
    list writes files with no host: the sweep found nothing to exclude, and a stale list must not survive."""
    lines = [f"# {line}" for line in header.splitlines()]
    for e in exclusions:
        lines += [f"# {e.reason}" if e.reason else "# (no reason given)", e.host]
    slurm = path.with_name(path.name + ".slurm")
    names = ",".join(e.host for e in exclusions)
    for target, text in ((path, "\n".join(lines) + "\n"), (slurm, f"--exclude={names}\n" if names else "")):
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            raise InputFileError(f"{target}: cannot write ({exc.__class__.__name__}: {exc})") from None
    return path, slurm


def select_hosts(hosts: list[Host], exclude: list[Exclusion]) -> HostSelection:
    """The hosts not excluded, in their order; the exclusions that matched; the excluded names the job lacks."""
    names = {h.name for h in hosts}
    banned = {e.host: e for e in exclude}
    kept = tuple(h for h in hosts if h.name not in banned)
    matched = tuple(e for e in exclude if e.host in names)
    unknown = tuple(e.host for e in exclude if e.host not in names)
    return HostSelection(kept, matched, unknown)
