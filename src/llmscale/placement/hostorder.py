"""The host order that realizes a placement, for the launchers that number ranks by it.

- hostfile: `NAME slots=g` per node in node-rank order (OpenMPI `--map-by slot`, DeepSpeed, `llmscale launch
  --hostfile`, whose node i is the hostfile's i-th kept host).
- Slurm: SLURM_HOSTFILE with one line per task (each host g times) for `srun --distribution=arbitrary`, which
  places task i on line i (Slurm srun(1), --distribution=arbitrary), and the `--nodelist` those hosts make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmscale.errors import InputFileError
from llmscale.placement.assign import Placement
from llmscale.placement.fabric import Fabric


@dataclass(frozen=True)
class HostOrder:
    """Physical hosts in node-rank order: node rank i runs on hosts[i]."""

    hosts: tuple[str, ...]
    gpus_per_node: int
    ranks: int
    """Ranks of the job: the last host takes what is left of them."""

    @classmethod
    def of(cls, fabric: Fabric, placement: Placement, ranks: int) -> HostOrder:
        return cls(tuple(fabric.name(int(i)) for i in placement.node_of), fabric.gpus_per_node, ranks)

    def slots(self, i: int) -> int:
        return min(self.gpus_per_node, self.ranks - i * self.gpus_per_node)

    def hostfile(self) -> str:
        return "".join(f"{h} slots={self.slots(i)}\n" for i, h in enumerate(self.hosts))

    def slurm_hostfile(self) -> str:
        return "".join(f"{h}\n" * self.slots(i) for i, h in enumerate(self.hosts))

    def srun_args(self) -> str:
        return (f"--nodes={len(self.hosts)} --ntasks={self.ranks} --distribution=arbitrary "
                f"--nodelist={','.join(self.hosts)}")

    def write(self, directory: Path) -> tuple[Path, ...]:
        """`hostfile`, `slurm_hostfile` and `srun_args.txt` in `directory` (created); InputFileError where it
        cannot be written."""
        files = {"hostfile": self.hostfile(), "slurm_hostfile": self.slurm_hostfile(),
                 "srun_args.txt": "# SLURM_HOSTFILE=slurm_hostfile srun " + self.srun_args() + " ...\n"
                 + self.srun_args() + "\n"}
        out = []
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (directory / name).write_text(text, encoding="utf-8")
                out.append(directory / name)
        except OSError as exc:
            raise InputFileError(f"--placement-out {directory}: cannot write ({exc.__class__.__name__}: {exc})"
                                 ) from None
        return tuple(out)


def check_out_dir(directory: Path) -> None:
    """Refuse, before any work, a --placement-out that is a file or under one."""
    for path in (directory, *directory.parents):
        if path.exists() and not path.is_dir():
            raise InputFileError(f"--placement-out {directory}: {path} is a file, not a directory")
