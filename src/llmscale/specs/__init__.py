"""Validated, frozen input specifications: model, cluster, training run and parallel layout."""

from llmscale.specs.cluster import ClusterSpec, GPUSpec, NetworkTier, NodeSpec, StorageSpec
from llmscale.specs.layout import Layout, Recompute, Schedule
from llmscale.specs.model import MLASpec, ModelSpec, Norm
from llmscale.specs.train import Optimizer, Precision, TrainSpec

__all__ = [
    "ClusterSpec",
    "GPUSpec",
    "Layout",
    "MLASpec",
    "ModelSpec",
    "NetworkTier",
    "NodeSpec",
    "Norm",
    "Optimizer",
    "Precision",
    "Recompute",
    "Schedule",
    "StorageSpec",
    "TrainSpec",
]
