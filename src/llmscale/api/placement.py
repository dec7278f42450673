"""Placement for the job commands: the fabric a hostfile and an exclusion list leave, the job size it caps, and the
placement search of the layouts a plan recommends or explain prices (placement.search)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmscale.errors import SpecError

if TYPE_CHECKING:  # the placement package is imported where a command places, not at every CLI start-up
    from llmscale.io.resolve import Job
    from llmscale.placement.fabric import Fabric
    from llmscale.placement.search import PlacementSearch
    from llmscale.specs.layout import Layout

__all__ = ["DEFAULT_PLACEMENTS", "MAX_PLACEMENTS", "FabricRequest", "capped", "check_out_dir", "place",
           "write_host_order"]

DEFAULT_PLACEMENTS = 3
"""Layouts of a plan's chosen job size whose placements are searched by default (the best first)."""
MAX_PLACEMENTS = 100


@dataclass(frozen=True)
class FabricRequest:
    """Where a job may be placed: a hostfile (None: the cluster's nodes) less an exclusion list."""

    hostfile: Path | None = None
    exclude_from: Path | None = None

    def fabric(self, job: Job) -> Fabric:
        from llmscale.placement.fabric import read_fabric

        return read_fabric(job.cluster, self.hostfile, self.exclude_from)


def check_out_dir(directory: Path) -> None:
    """Refuse a --placement-out that cannot take the host order files, before any work (placement.hostorder)."""
    from llmscale.placement.hostorder import check_out_dir as check

    check(directory)


def capped(job: Job, fabric: Fabric, gpus: int | None) -> Job:
    """`job` on the GPUs the fabric leaves free: its cluster shrunk to them where fewer; --gpus above them is
    refused, naming how many the exclusions and the hostfile leave."""
    free = fabric.free_nodes * fabric.gpus_per_node
    why = (f"the {free:,} GPUs left on {fabric.free_nodes:,} free nodes ({len(fabric.excluded)} excluded of "
           f"{fabric.size:,})")
    if gpus is not None and gpus > free:
        raise SpecError("gpus", gpus, f"at most {why}")
    if free == 0:
        raise SpecError("exclude_from", f"{len(fabric.excluded)} hosts", f"leaves no node free: {why}")
    if free >= job.cluster.num_gpus:
        return job
    return replace(job, cluster=job.cluster.model_copy(update={"num_gpus": free}))


def place(job: Job, layouts: list[Layout], fabric: Fabric,
          aligned_step_s: list[float] | None = None) -> tuple[PlacementSearch, ...]:
    """The placement search of each layout on `fabric` (`aligned_step_s`: their steps as a search priced them)."""
    from llmscale.placement.search import search_placements

    steps: list[float | None] = list(aligned_step_s) if aligned_step_s is not None else [None] * len(layouts)
    return tuple(search_placements(job.model, job.cluster, job.train, layout, job.constants, fabric, step)
                 for layout, step in zip(layouts, steps, strict=True))


def write_host_order(search: PlacementSearch, directory: Path) -> tuple[Path, ...]:
    """The best placement's hostfile, SLURM_HOSTFILE and srun arguments in `directory`."""
    from llmscale.placement.hostorder import HostOrder
    from llmscale.placement.mesh import world_size

    return HostOrder.of(search.fabric, search.best.placement, world_size(search.layout)).write(directory)
