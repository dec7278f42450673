"""The host order that realizes a placement, for the launchers that number ranks by it.

- hostfile: `NAME slots=g` per node in node-rank order (OpenMPI `--map-by slot`, DeepSpeed, `llmscale launch
  --hostfile`, whose node i is the hostfile's i-th kept host).
- Slurm: SLURM_HOSTFILE with one line per task (each host g times) for `srun --distribution=arbitrary`, which
  places task i on line i (Slurm srun(1), --distribution=arbitrary), and the `--nodelist` those hosts make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmscale.placement.assign import Placement
from llmscale.placement.fabric import Fabric


@dataclass(frozen=True)
class HostOrder:
    """Physical hosts in node-rank order: node rank i runs on hosts[i]."""

    hosts: tuple[str, ...]
    gpus_per_node: int

    @classmethod
    def of(cls, fabric: Fabric, placement: Placement) -> HostOrder:
        return cls(tuple(fabric.name(int(i)) for i in placement.node_of), fabric.gpus_per_node)

    def hostfile(self) -> str:
        return "".join(f"{h} slots={self.gpus_per_node}\n" for h in self.hosts)

    def slurm_hostfile(self) -> str:
        return "".join(f"{h}\n" * self.gpus_per_node for h in self.hosts)

    def srun_args(self) -> str:
        return (f"--nodes={len(self.hosts)} --ntasks={len(self.hosts) * self.gpus_per_node} "
                f"--distribution=arbitrary --nodelist={','.join(self.hosts)}")

    def write(self, directory: Path) -> tuple[Path, ...]:
        """`hostfile`, `slurm_hostfile` and `srun_args.txt` in `directory` (created)."""
        directory.mkdir(parents=True, exist_ok=True)
        files = {"hostfile": self.hostfile(), "slurm_hostfile": self.slurm_hostfile(),
                 "srun_args.txt": "# SLURM_HOSTFILE=slurm_hostfile srun " + self.srun_args() + " ...\n"
                 + self.srun_args() + "\n"}
        out = []
        for name, text in files.items():
            path = directory / name
            path.write_text(text, encoding="utf-8")
            out.append(path)
        return tuple(out)
