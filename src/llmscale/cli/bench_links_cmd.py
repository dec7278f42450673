"""`llmscale bench links`: the pairwise link sweep (measure/links.py) over a scope (cli/health_scope.py: this
machine, a hostfile's hosts, the cluster's tiers, a job's hosts), each pair against the catalog's bandwidth for its
tier when `--cluster` is given (else the measured median), the suspects written with `--exclude-out`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.cli.bench_cmd import (
    MAX_BLOCK_MS,
    MAX_RANKS,
    BackendOpt,
    NprocOpt,
    _emit,
    _world_size,
    bench_app,
    parse_sizes,
    resolve_backend,
)
from llmscale.errors import SpecError
from llmscale.units import GB

ScopeOpt = Annotated[str, typer.Option("--scope", help="node (this machine), cross-node (one rank per host), tiers "
                                       "(hostfile hosts on --cluster's tiers), hostfile (slots per host), job "
                                       "(--run-dir's hosts)")]
HostfileOpt = Annotated[Path | None, typer.Option("--hostfile", help="hosts: `NAME [slots=N] [addr=A]` per line")]
NodeExecOpt = Annotated[str | None, typer.Option("--node-exec", help="how a rank starts on a host: local, 'ssh "
                                                 "{host}' (default), 'ip netns exec {host}', 'srun -w {host} -N1 "
                                                 "-n1'")]
RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="with --scope job: the run directory")]
SweepClusterOpt = Annotated[str | None, typer.Option("--cluster", "-c", help="catalog cluster (or file) whose tier "
                                                     "bandwidths are each pair's reference [default: the median]")]
TimeoutOpt = Annotated[float, typer.Option("--timeout-s", help="with hosts: kill every rank after this long")]
ExcludeOutOpt = Annotated[Path | None, typer.Option("--exclude-out", help="write the suspect hosts as an exclusion "
                                                    "list: FILE (hostfile form) and FILE.slurm (--exclude=)")]


def hosts_backend(backend: str | None, placement: Any, nproc: int) -> str:
    """The backend: as `resolve_backend` on this machine; gloo unless told otherwise on hosts (whose GPUs this
    process cannot see)."""
    if not placement.hosts:
        return resolve_backend(backend, nproc)
    if backend not in (None, "gloo", "nccl"):
        raise SpecError("backend", backend, "gloo or nccl")
    return backend or "gloo"


def _check_flags(nproc: int, iters: int, repeats: int, threshold: float, slow_delay_ms: float, timeout_s: float,
                 rated_gb_per_s: float | None, cluster: str | None, schedule: str) -> None:
    for name, value, low, high in (("--nproc", nproc, 1, MAX_RANKS), ("--iters", iters, 1, 1e6),
                                   ("--repeats", repeats, 1, 1e4), ("--threshold", threshold, 0, 1),
                                   ("--slow-delay-ms", slow_delay_ms, 0, MAX_BLOCK_MS), ("--timeout-s", timeout_s, 1,
                                                                                         86400)):
        o.within(name, value, low, high)
    if not 0 < threshold <= 1:
        raise SpecError("threshold", threshold, "a fraction in (0, 1]")
    if rated_gb_per_s is not None and (rated_gb_per_s <= 0 or cluster is not None):
        raise SpecError("rated_gb_per_s", rated_gb_per_s, "a positive bandwidth in GB/s, without --cluster")
    if schedule not in ("auto", "rounds", "sequential"):
        raise SpecError("schedule", schedule, "auto, rounds or sequential")


@bench_app.command("links")
def links(
    nproc: NprocOpt = 4,
    backend: BackendOpt = None,
    size: Annotated[str, typer.Option("--size", help="bytes per exchange (K/M/G suffixes)")] = "1M",
    iters: Annotated[int, typer.Option("--iters", min=1, help="exchanges per timed block")] = 10,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="timed blocks per pair (best kept)")] = 15,
    threshold: Annotated[float, typer.Option("--threshold", help="sub-healthy below this fraction of the reference")]
    = 0.8,
    rated_gb_per_s: Annotated[float | None, typer.Option("--rated-gb-per-s", help="reference: the rated one-direction "
                                                         "bandwidth instead of the median")] = None,
    slow_rank: Annotated[int, typer.Option("--slow-rank", help="test hook: this rank sleeps before every exchange")]
    = -1,
    slow_delay_ms: Annotated[float, typer.Option("--slow-delay-ms", min=0.0, help="test hook: the sleep")] = 0.0,
    schedule: Annotated[str, typer.Option("--schedule", help="rounds (disjoint pairs at once), sequential (one pair "
                                          "at a time) or auto (sequential up to 64 pairs)")] = "auto",
    no_confirm: Annotated[bool, typer.Option("--no-confirm", help="skip timing suspects again one pair at a time")]
    = False,
    scope: ScopeOpt = "node",
    hostfile: HostfileOpt = None,
    node_exec: NodeExecOpt = None,
    run_dir: RunDirOpt = None,
    cluster: SweepClusterOpt = None,
    timeout_s: TimeoutOpt = 600.0,
    exclude_out: ExcludeOutOpt = None,
    as_json: o.JsonOpt = False,
) -> None:
    """Pairwise send/recv sweep over a scope's ranks; names sub-healthy ranks, pairs and nodes (JSON: `suspects`)."""
    _check_flags(nproc, iters, repeats, threshold, slow_delay_ms, timeout_s, rated_gb_per_s, cluster, schedule)
    from llmscale.cli import health_scope as hs

    placement = hs.resolve_placement(scope, nproc, hostfile, run_dir, node_exec, cluster)
    from llmscale.io.resolve import resolve_cluster
    from llmscale.measure import require_torch

    refs = hs.references(placement, resolve_cluster(cluster)) if cluster else None
    require_torch()
    from llmscale.measure import links as lk
    from llmscale.measure.launch import launch

    world = placement.world_size if placement.hosts else _world_size(placement.local_ranks)
    if slow_rank >= world:
        raise SpecError("slow_rank", slow_rank, f"a rank in 0..{world - 1} (or -1: none)")
    kind = hosts_backend(backend, placement, nproc)
    if schedule == "auto":
        schedule = "sequential" if world * (world - 1) // 2 <= 64 else "rounds"
    cfg = {"size_bytes": parse_sizes(size, "--size")[0], "iters": iters, "warmup": 2, "repeats": repeats,
           "slow_rank": slow_rank, "slow_delay_ms": slow_delay_ms, "confirm": not no_confirm, "threshold": threshold,
           "rated_bytes_per_s": rated_gb_per_s * GB if rated_gb_per_s else None, "schedule": schedule}
    result = hs.run_placed(placement, "links", cfg, kind, timeout_s, lambda: launch(lk.sweep_worker, cfg, nproc, kind))
    if result is None:
        return
    document = links_document(result, cfg, kind, placement, refs)
    _emit(as_json, document, links_text(document))
    if exclude_out is not None:
        from llmscale.cli.health import write_exclude_out

        typer.echo(write_exclude_out(document, exclude_out), err=True)


def links_document(result: dict[str, Any], cfg: dict[str, Any], backend: str, placement: Any = None,
                   refs: Any = None) -> dict[str, Any]:
    import numpy as np

    from llmscale.measure import links as lk
    from llmscale.measure import table

    hosts = [str(h) for h in result["hosts"]]
    seconds = np.array(result["seconds"], dtype=float)
    bandwidth = lk.bandwidth_matrix(seconds, result["size_bytes"])
    sweep = lk.bandwidth_matrix(np.array(result["sweep_seconds"], dtype=float), result["size_bytes"])

    def verdict(matrix: Any) -> list[Any]:
        if refs is not None:
            return lk.find_suspects_vs(matrix, refs.bytes_per_s, hosts, cfg["threshold"])
        return lk.find_suspects(matrix, hosts, cfg["threshold"], cfg["rated_bytes_per_s"])

    suspects = verdict(bandwidth)
    if cfg["confirm"]:
        suspects = lk.confirmed(suspects, verdict(sweep))
    rows = lk.pair_rows(bandwidth, seconds, sweep, hosts, result["size_bytes"], suspects)
    _add_references(rows, refs, suspects, cfg)
    return {"command": "bench links", **table.versions(), "backend": backend, "nproc": len(hosts),
            "scope": placement.scope.value if placement else "node",
            "placement": placement.source if placement else "this machine",
            "node_exec": placement.node_exec.text if placement and placement.hosts else None,
            "reference": _reference_doc(refs, cfg),
            "config": {k: cfg[k] for k in ("size_bytes", "iters", "repeats", "threshold", "rated_bytes_per_s",
                                           "slow_rank", "slow_delay_ms", "confirm", "schedule")},
            "hosts": hosts, "rows": rows,
            "retested": result["retested"], "reference_pairs": result["reference_pairs"],
            "alone_scale": result["alone_scale"], "healthy": not suspects, "suspects": [s.as_dict() for s in suspects]}


def _reference_doc(refs: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    if refs is not None:
        return {"kind": "catalog", "cluster": refs.cluster, "tiers_crossed": refs.crossed,
                "tiers_not_crossed": [t for t, count in refs.crossed.items() if not count]}
    if cfg["rated_bytes_per_s"]:
        return {"kind": "rated", "bytes_per_s": cfg["rated_bytes_per_s"]}
    return {"kind": "median", "why": "no --cluster: the catalog's expected bandwidth of these hosts is not known"}


def _add_references(rows: list[dict[str, Any]], refs: Any, suspects: list[Any],
                    cfg: dict[str, Any]) -> None:
    """Each row's tier (with a cluster), the reference it was judged against and its ratio to it."""
    import numpy as np

    pair_ref = cfg["rated_bytes_per_s"]
    if refs is None and not pair_ref:  # as links.find_suspects: the median of the pairs between clean ranks
        bad = {s.ranks[0] for s in suspects if s.kind == "rank"}
        clean = [r["bandwidth_bytes_per_s"] for r in rows if not {r["rank_a"], r["rank_b"]} & bad]
        pair_ref = float(np.median(clean or [r["bandwidth_bytes_per_s"] for r in rows]))
    for row in rows:
        i, j = row["rank_a"], row["rank_b"]
        row["tier"] = refs.tier[i][j] if refs is not None else "-"
        row["reference_bytes_per_s"] = float(refs.bytes_per_s[i, j]) if refs is not None else pair_ref
        row["ratio"] = row["bandwidth_bytes_per_s"] / row["reference_bytes_per_s"]


def links_text(document: dict[str, Any]) -> str:
    from llmscale.measure import table

    cfg, ref = document["config"], document["reference"]
    reference = {"catalog": f"the catalog's per-tier bandwidth of {ref.get('cluster')}",
                 "rated": f"rated {(cfg['rated_bytes_per_s'] or 0) / GB:g} GB/s"}.get(ref["kind"], "the median")
    columns = [table.Column("rank_a", "rank", "", 5, "d"), table.Column("rank_b", "peer", "", 5, "d"),
               table.Column("host_a", "host", "", 12, "s"), table.Column("host_b", "peer host", "", 12, "s"),
               table.Column("tier", "tier", "", 8, "s"), table.Column("size_bytes", "size", "(B)", 10, "d"),
               table.Column("time_s", "time", "(us)", 10, ".1f", 1e-6),
               table.Column("sweep_bandwidth_bytes_per_s", "sweep bw", "(GB/s)", 8, ".3f", GB),
               table.Column("bandwidth_bytes_per_s", "bw", "(GB/s)", 8, ".3f", GB),
               table.Column("reference_bytes_per_s", "ref", "(GB/s)", 8, ".3f", GB),
               table.Column("ratio", "ratio", "", 6, ".3f"), table.Column("status", "status", "", 10, "s")]
    preamble = [f"llmscale bench links   {table.version_line(document)}",
                f"scope {document['scope']}: {document['placement']}"
                + (f"  (ranks started via {document['node_exec']})" if document["node_exec"] else ""),
                f"backend {document['backend']}  nproc {document['nproc']}  size {cfg['size_bytes']} B  iters "
                f"{cfg['iters']}  blocks {cfg['repeats']} (best kept)  threshold {cfg['threshold']:g} x {reference}",
                *_reference_lines(ref),
                "each pair exchanges size bytes both ways (isend + irecv), "
                + ("one pair at a time" if cfg["schedule"] == "sequential" else "rounds of disjoint pairs at once")
                + "; bw = size / time, one direction (after the retests; sweep bw before them)",
                f"timed again alone: {', '.join(f'{a}-{b}' for a, b in document['retested']) or 'none'}"
                + (f" (references {', '.join(f'{a}-{b}' for a, b in document['reference_pairs'])}, sweep/alone "
                   f"{document['alone_scale']:.2f})" if document["retested"] and document["reference_pairs"] else "")
                + (f"   (test hook: rank {cfg['slow_rank']} sleeps {cfg['slow_delay_ms']:g} ms per exchange)"
                   if cfg["slow_rank"] >= 0 and cfg["slow_delay_ms"] else ""), ""]
    footer = [f"Suspects: {len(document['suspects']) or 'none'}"]
    for s in document["suspects"]:
        who = "-".join(str(r) for r in s["ranks"]) if s["kind"] == "pair" else ",".join(str(r) for r in s["ranks"])
        footer.append(f"  {s['kind']:5s} {who:10s} on {','.join(s['hosts'])}: {s['bandwidth_bytes_per_s'] / GB:.3f} "
                      f"GB/s = {s['ratio']:.2f} x reference {s['reference_bytes_per_s'] / GB:.3f} GB/s")
    return table.render(preamble, columns, document["rows"], footer)


def _reference_lines(ref: dict[str, Any]) -> list[str]:
    if ref["kind"] == "catalog":
        crossed = ", ".join(f"{t} {n}" for t, n in ref["tiers_crossed"].items())
        missing = ref["tiers_not_crossed"]
        return [f"pairs per tier: {crossed}" + (f"; not crossed (the hosts span too few nodes): {', '.join(missing)}"
                                                 if missing else ""),
                "ref = the tier's catalog bandwidth per GPU, one direction, before oversubscription"]
    if ref["kind"] == "median":
        return [f"ref = the measured median pair ({ref['why']})"]
    return []
