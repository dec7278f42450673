"""Link health sweep (`llmscale bench links`): every pair of ranks exchanges S bytes both ways (isend + irecv), suspects
are timed again alone, and ranks, pairs and nodes below θ · the reference (rated bandwidth, else a median) are named
sub-healthy (a rule of thumb, no published source).
Schedules, confirmation, the verdict rules and what is left out: docs/monitoring.md#measure-links.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Circle-method rounds: each a list of disjoint pairs (a < b); every pair appears exactly once."""
    ranks = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ranks)
    schedule = []
    for _ in range(m - 1):
        pairs = [(ranks[i], ranks[m - 1 - i]) for i in range(m // 2)]
        schedule.append([(min(a, b), max(a, b)) for a, b in pairs if a >= 0 and b >= 0])
        ranks = [ranks[0], ranks[-1], *ranks[1:-1]]
    return schedule


def sweep_worker(ctx: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """Seconds per exchange for every pair (matrix, the slower end), measured as the module docstring says."""
    import torch
    import torch.distributed as dist

    from llmscale.measure.timing import synchronizer

    n, me = ctx.world_size, ctx.rank
    hosts: list[Any] = [None] * n
    dist.all_gather_object(hosts, ctx.host)
    count = max(cfg["size_bytes"] // 4, 1)
    send = torch.ones(count, dtype=torch.float32, device=ctx.device)
    recv = torch.empty_like(send)
    sync = synchronizer(ctx.device)
    delay_s = cfg["slow_delay_ms"] / 1e3 if cfg["slow_rank"] == me else 0.0

    def exchange(peer: int, iters: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            if delay_s:
                time.sleep(delay_s)  # test hook: a slow NIC, host or link on this rank
            # `works` lives until the next exchange replaces it: freeing a gloo send/recv handle right after its
            # wait() stalls the next exchange
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, recv, peer), dist.P2POp(dist.isend, send, peer)])
            for work in works:
                work.wait()
        sync()
        return (time.perf_counter() - start) / iters

    def partner(pairs: list[tuple[int, int]]) -> int | None:
        return next((b if a == me else a for a, b in pairs if me in (a, b)), None)

    def sweep(schedule: list[list[tuple[int, int]]], blocks: int) -> Any:
        """Best seconds per exchange of every pair in `schedule` (matrix, the slower end). The blocks go round the
        whole schedule in turn, so each pair's best is drawn from the whole sweep's time, not one moment of it."""
        best = torch.full((n, n), float("inf"), dtype=torch.float64)
        for pairs in schedule:
            if (peer := partner(pairs)) is not None:
                exchange(peer, cfg["warmup"])
        for _ in range(blocks):
            for pairs in schedule:
                dist.barrier()
                if (peer := partner(pairs)) is not None:
                    best[me, peer] = min(float(best[me, peer]), exchange(peer, cfg["iters"]))
        mine = torch.where(torch.isinf(best), torch.zeros_like(best), best).to(ctx.device)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        return torch.maximum(mine, mine.T).cpu().numpy()

    everyone = rounds(n)
    first = sweep([[p] for r in everyone for p in r] if cfg["schedule"] == "sequential" else everyone,
                  cfg["repeats"])
    sweep_s = first.copy()
    retested, reference, scale = _confirm(first, [str(h) for h in hosts], cfg, sweep) if cfg["confirm"] else (
        [], [], 1.0)
    return {"hosts": hosts, "seconds": first.tolist(), "sweep_seconds": sweep_s.tolist(), "size_bytes": count * 4,
            "retested": [list(p) for p in retested], "reference_pairs": [list(p) for p in reference],
            "alone_scale": scale}


def _confirm(first: np.ndarray, hosts: list[str], cfg: dict[str, Any],
             sweep: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int]], float]:
    """Time the suspect pairs (and reference pairs) alone and put those times into `first`, scaled to the sweep's
    conditions by the reference pairs when no rated bandwidth is given. Every rank derives the same pairs from the
    same matrix. Returns (retested, reference, scale)."""
    retested, reference = _to_confirm(first, hosts, cfg)
    if not retested:
        return retested, reference, 1.0
    alone_s = sweep([[p] for p in retested + reference], 2 * cfg["repeats"])
    scale = 1.0
    if reference and cfg["rated_bytes_per_s"] is None:
        scale = float(np.median([first[p] for p in reference]) / np.median([alone_s[p] for p in reference]))
    for a, b in retested:
        first[a, b] = first[b, a] = alone_s[a, b] * scale
    return retested, reference, scale


def bandwidth_matrix(seconds: np.ndarray, size_bytes: int) -> np.ndarray:
    """S / seconds per exchange, inf on the diagonal (a rank with itself is no link)."""
    with np.errstate(divide="ignore"):
        bandwidth = size_bytes / np.asarray(seconds, dtype=float)
    np.fill_diagonal(bandwidth, np.inf)
    return bandwidth


def _to_confirm(seconds: np.ndarray, hosts: list[str], cfg: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(pairs to time again alone: the suspect pairs and every pair of a suspect rank or node; up to 4 clean pairs
    nearest the median, timed alone too, whose concurrent/alone ratio puts the alone times on the sweep's scale)."""
    bandwidth = bandwidth_matrix(seconds, cfg["size_bytes"])
    suspects = find_suspects(bandwidth, hosts, cfg["threshold"], cfg["rated_bytes_per_s"])
    n = seconds.shape[0]
    ranks = {r for s in suspects if s.kind != "pair" for r in s.ranks}
    pairs = {s.ranks for s in suspects if s.kind == "pair"}
    pairs |= {(min(r, q), max(r, q)) for r in ranks for q in range(n) if q != r}
    clean = [(int(a), int(b)) for a, b in zip(*np.triu_indices(n, 1), strict=True)
             if (a, b) not in pairs and not {int(a), int(b)} & ranks]
    middle = float(np.median([seconds[p] for p in clean])) if clean else 0.0
    reference = sorted(sorted(clean, key=lambda p: abs(seconds[p] - middle))[:4])
    return sorted((int(a), int(b)) for a, b in pairs), reference


@dataclass(frozen=True)
class Suspect:
    """A sub-healthy rank, pair or node: its bandwidth and the reference it fell below."""

    kind: str
    """'rank', 'pair' or 'node'."""
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    bandwidth_bytes_per_s: float
    reference_bytes_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ranks": list(self.ranks), "hosts": sorted(set(self.hosts)),
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "reference_bytes_per_s": self.reference_bytes_per_s,
                "ratio": self.bandwidth_bytes_per_s / self.reference_bytes_per_s}


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else float("nan")


def _score(values: np.ndarray, upper: bool) -> float:
    """The median of a rank's (node's) pair bandwidths, or the upper median (module docstring: verdict)."""
    if not values.size:
        return float("nan")
    return float(np.sort(values)[values.size // 2]) if upper else float(np.median(values))


def find_suspects(bandwidth: np.ndarray, hosts: list[str], threshold: float,
                  rated_bytes_per_s: float | None = None) -> list[Suspect]:
    """Sub-healthy ranks, pairs and nodes of a symmetric (n, n) bandwidth matrix (module docstring: verdict)."""
    n = bandwidth.shape[0]
    off = ~np.eye(n, dtype=bool)
    upper = rated_bytes_per_s is not None
    scores = np.array([_score(bandwidth[r][off[r]], upper) for r in range(n)])
    suspects: list[Suspect] = []
    ref = rated_bytes_per_s or _median(scores)
    bad = scores < threshold * ref if n >= 3 or rated_bytes_per_s else np.zeros(n, dtype=bool)
    suspects += [Suspect("rank", (int(r),), (hosts[r],), float(scores[r]), ref) for r in np.flatnonzero(bad)]
    a, b = np.triu_indices(n, 1)
    clean = ~bad[a] & ~bad[b]
    pair_ref = rated_bytes_per_s or _median(bandwidth[a[clean], b[clean]] if clean.any() else bandwidth[a, b])
    for i, j in zip(a, b, strict=True):
        if bandwidth[i, j] < threshold * pair_ref:
            suspects.append(Suspect("pair", (int(i), int(j)), (hosts[i], hosts[j]), float(bandwidth[i, j]), pair_ref))
    names = sorted(set(hosts))
    if len(names) > 1:
        where = np.array(hosts)
        node_scores = {}
        for name in names:
            mine, other = where == name, where != name
            node_scores[name] = _score(bandwidth[np.ix_(mine, other)].ravel(), upper)
        node_ref = rated_bytes_per_s or float(np.median(list(node_scores.values())))
        suspects += [Suspect("node", tuple(int(r) for r in np.flatnonzero(where == name)), (name,), score, node_ref)
                     for name, score in node_scores.items() if score < threshold * node_ref]
    return suspects


def confirmed(final: list[Suspect], sweep: list[Suspect]) -> list[Suspect]:
    """The suspects of the final matrix that the sweep already named (confirmation clears, never adds: a pair the
    sweep passed was not timed again, so a reference shifted by the retests must not condemn it)."""
    named = {(s.kind, s.ranks) for s in sweep}
    return [s for s in final if (s.kind, s.ranks) in named]


def pair_rows(bandwidth: np.ndarray, seconds: np.ndarray, sweep_bandwidth: np.ndarray, hosts: list[str],
              size_bytes: int, suspects: list[Suspect]) -> list[dict[str, Any]]:
    """One row per pair for the table and JSON, with its verdict."""
    flagged = {s.ranks for s in suspects if s.kind == "pair"}
    bad_ranks = {s.ranks[0] for s in suspects if s.kind == "rank"}
    rows = []
    for i, j in zip(*np.triu_indices(bandwidth.shape[0], 1), strict=True):
        status = "SLOW" if (int(i), int(j)) in flagged else "ok"
        if status == "SLOW" and ({int(i), int(j)} & bad_ranks):
            status = "SLOW(rank)"
        rows.append({"rank_a": int(i), "rank_b": int(j), "host_a": hosts[i], "host_b": hosts[j],
                     "size_bytes": size_bytes, "time_s": float(seconds[i, j]),
                     "bandwidth_bytes_per_s": float(bandwidth[i, j]),
                     "sweep_bandwidth_bytes_per_s": float(sweep_bandwidth[i, j]), "status": status})
    return rows


def find_suspects_vs(bandwidth: np.ndarray, reference: np.ndarray, hosts: list[str],
                     threshold: float) -> list[Suspect]:
    """`find_suspects` against a per-pair expected bandwidth (the catalog's for each pair's tier): the verdict runs
    on bandwidth / reference with a rated reference of 1, and each suspect reports its measured bandwidth beside the
    median expected bandwidth of the pairs its score came from."""
    with np.errstate(invalid="ignore"):  # inf / inf on the diagonal, set just below
        ratio = bandwidth / reference
    np.fill_diagonal(ratio, np.inf)
    n = bandwidth.shape[0]
    off = ~np.eye(n, dtype=bool)
    where = np.array(hosts)
    found = []
    for s in find_suspects(ratio, hosts, threshold, rated_bytes_per_s=1.0):
        if s.kind == "pair":
            expected = float(reference[s.ranks])
        elif s.kind == "rank":
            expected = _median(reference[s.ranks[0]][off[s.ranks[0]]])
        else:
            mine = where == s.hosts[0]
            expected = _median(reference[np.ix_(mine, ~mine)].ravel())
        found.append(Suspect(s.kind, s.ranks, s.hosts, s.bandwidth_bytes_per_s * expected, expected))
    return found
