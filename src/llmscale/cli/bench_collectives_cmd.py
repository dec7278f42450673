"""`llmscale bench collectives`: nccl-tests-style collectives (measure/collectives.py) over a scope's ranks
(cli/health_scope.py), each row's busbw against the catalog's bandwidth of the slowest tier its group crosses when
`--cluster` is given; `--exclude-out` writes the hosts a slow row can be pinned on.

A collective's time is its slowest member's: a slow row whose group lies on one host names that host; a slow row
across hosts names no host (any member may be the bad one) and is listed in the exclusion file's header — `bench
links` over the same hosts tells which one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.cli.bench_cmd import (
    MAX_BLOCK_MS,
    MAX_RANKS,
    BackendOpt,
    BlockOpt,
    NprocOpt,
    SizesOpt,
    _emit,
    bench_app,
    parse_sizes,
)
from llmscale.cli.bench_links_cmd import (
    ExcludeOutOpt,
    HostfileOpt,
    NodeExecOpt,
    RunDirOpt,
    ScopeOpt,
    SweepClusterOpt,
    TimeoutOpt,
    hosts_backend,
)
from llmscale.errors import SpecError
from llmscale.units import GB


def _rank_lines(ranks: list[dict[str, Any]]) -> list[str]:
    return [f" Rank {r['rank']:3d} Pid {r['pid']:7d} on {r['host']:>12} device {r['device']:>7} {r['device_name']}"
            for r in ranks]


COLLECTIVE_COLUMNS = (
    ("scope", "scope", "", 10, "s", 1.0), ("op", "op", "", 14, "s", 1.0), ("impl", "impl", "", 7, "s", 1.0),
    ("size_bytes", "size", "(B)", 10, "d", 1.0), ("count", "count", "(elements)", 10, "d", 1.0),
    ("type", "type", "", 8, "s", 1.0), ("time_s", "time", "(us)", 10, ".1f", 1e-6),
    ("algbw_bytes_per_s", "algbw", "(GB/s)", 7, ".3f", GB), ("busbw_bytes_per_s", "busbw", "(GB/s)", 7, ".3f", GB),
    ("wrong", "#wrong", "", 6, "d", 1.0), ("plain_time_s", "plain", "(us)", 10, ".1f", 1e-6),
    ("plain_busbw_bytes_per_s", "busbw", "(GB/s)", 7, ".3f", GB), ("ratio", "ratio", "", 6, ".3f", 1.0),
)


@bench_app.command("collectives")
def collectives(
    nproc: NprocOpt = 2,
    backend: BackendOpt = None,
    ops: Annotated[str | None, typer.Option("--ops", help="comma-separated: all_reduce,all_gather,reduce_scatter,"
                                            "all_to_all,send_recv (default all)")] = None,
    sizes: SizesOpt = None,
    dtype: Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16")] = "float32",
    iters: Annotated[int, typer.Option("--iters", min=0, help="calls per timed block (0: fill --block-ms)")] = 0,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="timed blocks per size (median kept)")] = 31,
    block_ms: BlockOpt = 6.0,
    scope: ScopeOpt = "node",
    hostfile: HostfileOpt = None,
    node_exec: NodeExecOpt = None,
    run_dir: RunDirOpt = None,
    cluster: SweepClusterOpt = None,
    threshold: Annotated[float, typer.Option("--threshold", help="with --cluster: slow below this fraction of the "
                                             "catalog busbw")] = 0.8,
    timeout_s: TimeoutOpt = 600.0,
    exclude_out: ExcludeOutOpt = None,
    as_json: o.JsonOpt = False,
) -> None:
    """nccl-tests-style table of collectives (time, algbw, busbw, #wrong) beside a plain torch.distributed loop,
    over a scope's ranks; with --cluster each row against the catalog busbw of the tiers its group crosses."""
    for name, value, low, high in (("--block-ms", block_ms, 0.1, MAX_BLOCK_MS), ("--nproc", nproc, 1, MAX_RANKS),
                                   ("--iters", iters, 0, 1e6), ("--repeats", repeats, 1, 1e4),
                                   ("--threshold", threshold, 0, 1), ("--timeout-s", timeout_s, 1, 86400)):
        o.within(name, value, low, high)
    if exclude_out is not None and cluster is None:
        raise SpecError("exclude_out", str(exclude_out), "with --cluster (the catalog busbw is what a row is judged "
                        "against; without it `bench links --exclude-out` judges against the median)")
    from llmscale.cli import health_scope as hs
    from llmscale.io.resolve import resolve_cluster
    from llmscale.measure import require_torch

    placement = hs.resolve_placement(scope, nproc, hostfile, run_dir, node_exec, cluster)
    refs = hs.references(placement, resolve_cluster(cluster)) if cluster else None
    require_torch()
    from llmscale.measure import collectives as c
    from llmscale.measure.launch import launch

    chosen_ops = _chosen_ops(ops, dtype, c.OPS)
    kind = hosts_backend(backend, placement, nproc)
    chosen = parse_sizes(sizes) if sizes else list(c.DEFAULT_GPU_SIZES if kind == "nccl" else c.DEFAULT_CPU_SIZES)
    cfg = c.bench_config(chosen_ops, chosen, dtype, kind, iters=iters, repeats=repeats, target_s=block_ms / 1e3)
    result = hs.run_placed(placement, "collectives", cfg, kind, timeout_s,
                           lambda: launch(c.collectives_worker, cfg, nproc, kind))
    if result is None:
        return  # a non-zero rank under torchrun
    document = collectives_document(result, cfg, kind)
    document.update(scope=placement.scope.value, placement=placement.source)
    if refs is not None:
        judge(document, refs, threshold)
    _emit(as_json, document, collectives_text(document))
    if exclude_out is not None:
        typer.echo(write_collectives_exclude_out(document, exclude_out), err=True)
    if document["wrong"]:
        raise typer.Exit(1)


def _chosen_ops(ops: str | None, dtype: str, known: tuple[str, ...]) -> list[str]:
    chosen = [x.strip() for x in ops.split(",")] if ops else list(known)
    for op in chosen:
        if op not in known:
            raise SpecError("ops", op, f"one of {', '.join(known)}")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise SpecError("dtype", dtype, "float32, bfloat16 or float16")
    return chosen


def judge(document: dict[str, Any], refs: Any, threshold: float) -> None:
    """Each row's reference (the catalog bandwidth of the slowest tier between two of its group's ranks), ratio and
    verdict; `suspects`: the slow rows, with their hosts."""
    hosts = [str(r["host"]) for r in document["ranks"]]
    suspects = []
    for row in document["rows"]:
        group = row["group_ranks"]
        pairs = [(a, b) for a in group for b in group if a < b]
        reference = min(float(refs.bytes_per_s[a, b]) for a, b in pairs)
        tier = next(refs.tier[a][b] for a, b in pairs if float(refs.bytes_per_s[a, b]) == reference)
        row.update(tier_name=tier, reference_bytes_per_s=reference,
                   reference_ratio=row["busbw_bytes_per_s"] / reference)
        row["status"] = "SLOW" if row["reference_ratio"] < threshold else "ok"
        if row["status"] == "SLOW":
            suspects.append({"scope": row["scope"], "op": row["op"], "size_bytes": row["size_bytes"],
                             "ranks": group, "hosts": sorted({hosts[r] for r in group}), "tier": tier,
                             "busbw_bytes_per_s": row["busbw_bytes_per_s"], "reference_bytes_per_s": reference,
                             "ratio": row["reference_ratio"]})
    document.update(reference={"kind": "catalog", "cluster": refs.cluster, "threshold": threshold},
                    suspects=suspects)


def write_collectives_exclude_out(document: dict[str, Any], path: Path) -> str:
    """FILE and FILE.slurm (runtime/hosts.py): the hosts of slow rows on one host; slow rows across hosts in the
    header (module docstring)."""
    import time

    from llmscale.runtime.hosts import Exclusion, write_exclusions

    found: dict[str, Exclusion] = {}
    across = []
    for s in document.get("suspects", []):
        what = (f"bench collectives: {s['op']} {s['size_bytes']} B on ranks {','.join(map(str, s['ranks']))} at "
                f"{s['busbw_bytes_per_s'] / GB:.3f} GB/s busbw = {s['ratio']:.2f} x catalog {s['tier']} "
                f"{s['reference_bytes_per_s'] / GB:.3f} GB/s")
        if len(s["hosts"]) == 1:
            found.setdefault(s["hosts"][0], Exclusion(s["hosts"][0], what))
        else:
            across.append(f"{what} across {','.join(s['hosts'])}")
    header = (f"llmscale bench collectives {time.strftime('%Y-%m-%dT%H:%M:%S')}: {len(document['ranks'])} ranks"
              + "".join(f"\nslow across hosts (no host named; bench links over them tells which): {a}"
                        for a in across))
    main, slurm = write_exclusions(path, list(found.values()), header)
    return (f"exclusion list: {len(found)} host(s) -> {main} and {slurm}"
            + (f"; {len(across)} slow row(s) across hosts named no host" if across else ""))


def collectives_document(result: dict[str, Any], cfg: dict[str, Any], backend: str) -> dict[str, Any]:
    from llmscale.measure import table

    rows = result["rows"]
    busbw = [r["busbw_bytes_per_s"] for r in rows]
    return {"command": "bench collectives", **table.versions(), "backend": backend, "nproc": len(result["ranks"]),
            "config": {k: cfg[k] for k in ("ops", "sizes", "dtype", "iters", "warmup", "repeats", "target_s")},
            "ranks": result["ranks"], "rows": rows, "wrong": sum(r["wrong"] for r in rows),
            "avg_busbw_bytes_per_s": sum(busbw) / len(busbw) if busbw else 0.0}


def collectives_text(document: dict[str, Any]) -> str:
    from llmscale.measure import table

    cfg = document["config"]
    columns = [table.Column(*spec) for spec in COLLECTIVE_COLUMNS]
    judged = document.get("reference", {}).get("kind") == "catalog"
    if judged:
        columns += [table.Column("tier_name", "tier", "", 8, "s"),
                    table.Column("reference_bytes_per_s", "ref", "(GB/s)", 8, ".3f", GB),
                    table.Column("reference_ratio", "vs ref", "", 6, ".3f"),
                    table.Column("status", "status", "", 6, "s")]
    preamble = [f"llmscale bench collectives   {table.version_line(document)}",
                f"backend {document['backend']}  nproc {document['nproc']}  dtype {cfg['dtype']}  warmup "
                f"{cfg['warmup']}  blocks {cfg['repeats']} (median)  iters/block "
                f"{cfg['iters'] or 'auto, ~%g ms' % (cfg['target_s'] * 1e3)}",
                f"scope {document.get('scope', 'node')}: {document.get('placement', 'this machine')}; reference: "
                + (f"the catalog busbw of {document['reference']['cluster']}'s slowest tier in each group (per GPU, "
                   f"one direction), slow below {document['reference']['threshold']:g} x" if judged else
                   "none (no --cluster: the rows are not judged)"),
                "", "Using devices", *_rank_lines(document["ranks"]), "",
                "busbw = algbw·f(n): 2(n-1)/n all_reduce, (n-1)/n all_gather/reduce_scatter/all_to_all, 1 send_recv "
                "(nccl-tests PERFORMANCE.md)",
                "plain: the same calls in a bare torch.distributed loop, blocks interleaved with the bench's; ratio = "
                "median over block pairs of plain time / bench time",
                "impl a2a+sum: gloo's reduce_scatter_tensor all-reduces the whole input, so it runs as "
                "all_to_all_single + local sum", ""]
    wrong = document["wrong"]
    footer = [f"Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
              f"Avg bus bandwidth    : {document['avg_busbw_bytes_per_s'] / GB:.3f} GB/s"]
    if judged:
        footer.append(f"Slow rows            : {len(document['suspects']) or 'none'}")
        footer += [f"  {s['scope']} {s['op']} {s['size_bytes']} B on {','.join(s['hosts'])}: {s['ratio']:.3f} x "
                   f"{s['tier']}" for s in document["suspects"]]
    return table.render(preamble, columns, document["rows"], footer)
