"""Checkpoint size and transfer times from the layout, and the cost of a restart; array fields of shape (N,), one per
job. 14 B per parameter (BLOOM-176B), each unique shard written once; a storage write takes
max(B_node / min(NIC, PCIe), B_total / BW_storage) (MegaScale arXiv:2402.15627 §4.4, Llama 3 arXiv:2407.21783 §3.3.1).
Sources, the per-GPU bytes and what is left out: docs/design-notes.md#reliability-checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.derived import LayoutDerived, derive
from llmscale.cost.model_state import optimizer_state_bytes_per_param
from llmscale.cost.params import count_params
from llmscale.layout.arrays import Layouts
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import CheckpointConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import GB

BYTES_16BIT_WEIGHT = 2.0


def bytes_per_param(train: TrainSpec) -> float:
    """Saved bytes per parameter: 2 (16-bit weights) plus the optimizer state the GPU keeps (fp32 master if kept,
    Adam's two moments or SGD's one, in fp32 or bf16: cost.memory.optimizer_state_bytes_per_param)."""
    return BYTES_16BIT_WEIGHT + optimizer_state_bytes_per_param(train)


def layout_bytes_per_gpu(model: ModelSpec, train: TrainSpec, lay: Layouts,
                         derived: LayoutDerived | None = None) -> np.ndarray:
    """Unique checkpoint bytes of the most loaded GPU of each layout (module docstring), from the parameters of
    each representative rank (`cost.derived`)."""
    derived = derived if derived is not None else derive(model, train, lay)
    worst = np.zeros(lay.size)
    for stage in derived.stages.values():
        params = stage.params
        unique = params.non_expert / (lay.dp * lay.cp) + params.expert / np.maximum(lay.edp, 1)
        worst = np.maximum(worst, unique)
    return worst * bytes_per_param(train)


def state_bytes(model: ModelSpec, train: TrainSpec) -> float:
    """The whole checkpoint: every parameter once, P · 14 B (BLOOM-176B: 176e9 · 14 B = 2.46 TB vs 2.3 TB measured)."""
    return count_params(model).total * bytes_per_param(train)


@dataclass(frozen=True)
class CheckpointCost:
    """Size and transfer times of one checkpoint of each job."""

    state_bytes: np.ndarray
    """The whole checkpoint, every unique shard once."""
    bytes_per_gpu: np.ndarray
    """The most loaded GPU's unique share."""
    bytes_per_node: np.ndarray
    """The most loaded node's share (its GPUs × bytes_per_gpu)."""
    snapshot_s: np.ndarray
    """Device→host copy over PCIe: what an asynchronous checkpoint blocks for."""
    replicate_s: np.ndarray
    """Host memory → a peer node's host memory over the NIC (background)."""
    storage_write_s: np.ndarray
    """Write to persistent storage: blocking when synchronous, the durability lag when asynchronous."""
    storage_limited: np.ndarray
    """True where the storage system's aggregate bandwidth, not the nodes' links, sets the write time."""
    load_memory_s: np.ndarray
    """Restore from the memory tier: host→device, the replacement node fetching its shard from its peer."""
    load_storage_s: np.ndarray
    """Restore from persistent storage."""
    host_tier_fits: np.ndarray
    """The node's own snapshot and its peer's replica fit in the host memory a tier may use."""
    storage_assumed: bool
    """The cluster gives no storage figure; the per-GPU default of catalog/checkpoint.yaml was scaled."""
    interference: float
    """Slow-down of training while a background transfer (replication, storage write) runs (catalog)."""


def _storage_bytes_per_s(cluster: ClusterSpec, num_gpus: np.ndarray, cluster_gpus: int,
                         const: CheckpointConstants) -> tuple[np.ndarray, np.ndarray, bool]:
    """The job's share of the storage system: G / N of it, as when every job of a full cluster checkpoints at once
    (a job alone on the cluster would see more)."""
    if cluster.storage is not None:
        share = np.minimum(num_gpus / cluster_gpus, 1.0)
        return share * cluster.storage.write_gb_per_s * GB, share * cluster.storage.read_gb_per_s * GB, False
    return num_gpus * const.storage_write_bytes_per_s_per_gpu, num_gpus * const.storage_read_bytes_per_s_per_gpu, True


def checkpoint_cost(cluster: ClusterSpec, total_bytes: float | np.ndarray, bytes_per_gpu: np.ndarray,
                    num_gpus: np.ndarray, const: CheckpointConstants,
                    cluster_gpus: int | None = None) -> CheckpointCost:
    """Transfer times of a checkpoint of `total_bytes` whose most loaded GPU holds `bytes_per_gpu` (module
    docstring): snapshot B_gpu / PCIe; write max(B_node / min(NIC_node, PCIe_node), B_total / BW_write); replicate
    B_node / NIC_node; load from memory max(B_gpu / PCIe, B_node / NIC_node); load from storage as the write, read.
    BW is the job's share of the storage system (G / `cluster_gpus`, default the cluster's GPUs)."""
    gpus = np.asarray(num_gpus, dtype=float)
    per_gpu = np.asarray(bytes_per_gpu, dtype=float)
    total = np.broadcast_to(np.asarray(total_bytes, dtype=float), gpus.shape)
    node = cluster.node
    per_node = per_gpu * node.gpus_per_node
    pcie = node.pcie_bytes_per_s
    nic_node = node.nic_bytes_per_s_per_gpu * node.gpus_per_node
    link_node = min(nic_node, pcie * node.gpus_per_node)
    write_bw, read_bw, assumed = _storage_bytes_per_s(cluster, gpus, cluster_gpus or cluster.num_gpus, const)
    snapshot = per_gpu / pcie
    write = np.maximum(per_node / link_node, total / write_bw)
    read = np.maximum(per_node / link_node, total / read_bw)
    return CheckpointCost(
        state_bytes=total, bytes_per_gpu=per_gpu, bytes_per_node=per_node, snapshot_s=snapshot,
        replicate_s=per_node / nic_node, storage_write_s=np.maximum(write, snapshot),
        storage_limited=total / write_bw > per_node / link_node,
        load_memory_s=np.maximum(snapshot, per_node / nic_node), load_storage_s=np.maximum(read, snapshot),
        host_tier_fits=2.0 * per_node <= const.host_memory_fraction * node.host_memory_bytes,
        storage_assumed=assumed, interference=const.background_interference,
    )


def layout_checkpoint_cost(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts,
                           const: CheckpointConstants, cluster_gpus: int | None = None,
                           derived: LayoutDerived | None = None) -> CheckpointCost:
    """checkpoint_cost of each layout's own sharding."""
    return checkpoint_cost(cluster, state_bytes(model, train), layout_bytes_per_gpu(model, train, lay, derived),
                           lay.num_gpus.astype(float), const, cluster_gpus)


def even_checkpoint_cost(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: np.ndarray,
                         const: CheckpointConstants) -> CheckpointCost:
    """checkpoint_cost with the state spread evenly over the job's GPUs (B_gpu = P · 14 B / G): the bound a layout
    that shards every parameter reaches, used where no layout is given (`llmscale goodput`)."""
    gpus = np.asarray(num_gpus, dtype=float)
    total = state_bytes(model, train)
    return checkpoint_cost(cluster, total, total / gpus, gpus, const)


@dataclass(frozen=True)
class RestartCost:
    """Downtime of one restart after an interruption (detection, reschedule, start-up and checkpoint load;
    catalog/checkpoint.yaml gives each constant its source)."""

    detection_s: float
    reschedule_s: float
    """Swap in a hot spare, or requeue and wait for a node."""
    startup_s: float
    load_memory_s: np.ndarray
    load_storage_s: np.ndarray

    @property
    def from_memory_s(self) -> np.ndarray:
        return self.detection_s + self.reschedule_s + self.startup_s + self.load_memory_s

    @property
    def from_storage_s(self) -> np.ndarray:
        return self.detection_s + self.reschedule_s + self.startup_s + self.load_storage_s

    def planned_s(self, from_memory: bool) -> np.ndarray:
        """An announced stop needs no detection."""
        load = self.load_memory_s if from_memory else self.load_storage_s
        return self.reschedule_s + self.startup_s + load


def restart_cost(ckpt: CheckpointCost, const: CheckpointConstants, hot_spares: bool = True) -> RestartCost:
    """Detection + rescheduling (hot spare or requeue) + start-up + checkpoint load; catalog/checkpoint.yaml. The
    work lost since the last checkpoint is the goodput model's (goodput.py), not a fixed cost."""
    return RestartCost(
        detection_s=const.detection_s,
        reschedule_s=const.reschedule_hot_spare_s if hot_spares else const.reschedule_requeue_s,
        startup_s=const.startup_s, load_memory_s=ckpt.load_memory_s, load_storage_s=ckpt.load_storage_s,
    )
