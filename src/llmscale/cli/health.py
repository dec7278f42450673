"""The health sweep's verdict as an exclusion list (`bench links --exclude-out FILE`, runtime/hosts.py formats):
the hosts of every suspect rank and node, each with the measured ratio as its reason. A suspect pair alone names no
host (either end may be the bad one: its ranks' scores decide); it is listed in the file's header."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from llmscale.units import GB


def suspects_to_exclusions(document: dict[str, Any]) -> list[Any]:
    from llmscale.runtime.hosts import Exclusion

    found: dict[str, Any] = {}
    for s in document["suspects"]:
        if s["kind"] == "pair":
            continue
        who = ",".join(str(r) for r in s["ranks"])
        reason = (f"bench links: {s['kind']} {who} at {s['bandwidth_bytes_per_s'] / GB:.3f} GB/s = {s['ratio']:.2f} "
                  f"x reference {s['reference_bytes_per_s'] / GB:.3f} GB/s")
        for host in s["hosts"]:
            found.setdefault(host, Exclusion(host, reason))
    return list(found.values())


def write_exclude_out(document: dict[str, Any], path: Path) -> str:
    """Write FILE and FILE.slurm; the one line saying what was written."""
    from llmscale.runtime.hosts import write_exclusions

    exclusions = suspects_to_exclusions(document)
    pairs = [f"{a}-{b}" for s in document["suspects"] if s["kind"] == "pair" for a, b in [s["ranks"]]]
    header = (f"llmscale bench links {time.strftime('%Y-%m-%dT%H:%M:%S')}: {len(document['hosts'])} ranks, threshold "
              f"{document['config']['threshold']:g}" + (f"\nslow pairs (no host named): {', '.join(pairs)}"
                                                         if pairs else ""))
    main, slurm = write_exclusions(path, exclusions, header)
    return f"exclusion list: {len(exclusions)} host(s) -> {main} and {slurm}"
