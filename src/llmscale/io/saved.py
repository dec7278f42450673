"""Saved documents as inputs: what the JSON of `llmscale plan --json` (its best layout, `top[0]`) or of
`llmscale explain --json` / `memory --json` says about the job it was made for — so `--from-plan FILE` can explain,
size or export that job again.

Documents written since the resolver embeds its inputs carry `inputs` (the resolved model, cluster and train
specs, and the constants when they were not the catalog's): those are used as they are, whatever file, catalog
name or HF config produced them. Older documents name the model and cluster (catalog names or paths) and record
the batch (plan: `global_batch` sequences and tokens; explain: `train`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscale.errors import InputFileError
from llmscale.io.files import parse_spec, read_document
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.model import ModelSpec


@dataclass(frozen=True)
class SavedJob:
    """The job a saved document describes (module docstring); every field as the document gives it."""

    model: str | ModelSpec
    cluster: str | ClusterSpec
    gpus: int | None
    layout: dict[str, Any]
    train: dict[str, Any] = field(default_factory=dict)
    constants: Constants | None = None
    framework: str | None = None
    """The framework release it was made under (`megatron-bridge@26.08`, `any`); None: the document names none."""


def read_saved(path: Path) -> SavedJob:
    """The job of a plan or explain document; a file that is neither, or a key of the wrong kind, is one
    InputFileError naming it."""
    doc = read_document(path)
    if "top" in doc:
        top = doc["top"]
        if not isinstance(top, list) or not top or not isinstance(top[0], dict):
            raise InputFileError(f"{path}: 'top' holds no layout (no layout of the plan fits in memory)")
        entry, train = top[0], _plan_train(doc)
    elif "layout" in doc:
        entry, train = doc, _object(path, doc, "train", {})
    else:
        raise InputFileError(f"{path}: neither a plan (top[0].layout) nor an explain document (layout)")
    layout, gpus = entry.get("layout"), entry.get("num_gpus")
    if not isinstance(layout, dict):
        raise InputFileError(f"{path}: 'layout' must be a mapping of layout fields")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):
        raise InputFileError(f"{path}: 'num_gpus' must be a whole number of GPUs, not {gpus!r}")
    model, cluster, constants = _inputs(path, doc)
    inputs = _object(path, doc, "inputs", None)
    train = _object(path, inputs, "train", train) if inputs is not None else train
    return SavedJob(model, cluster, gpus, layout, train, constants, _release(path, doc))


def _release(path: Path, doc: dict[str, Any]) -> str | None:
    """The `framework.release` a plan or explain document records."""
    entry = _object(path, doc, "framework", {})
    release = entry.get("release")
    if release is not None and not isinstance(release, str):
        raise InputFileError(f"{path}: 'framework.release' must be a text such as megatron-bridge@26.08")
    return release


def _object(path: Path, doc: dict[str, Any], key: str, absent: Any) -> Any:
    """`doc[key]` when it is a JSON object, `absent` when the key is missing; anything else is an error."""
    value = doc.get(key)
    if value is None:
        return absent
    if not isinstance(value, dict):
        raise InputFileError(f"{path}: '{key}' must be a mapping, not {type(value).__name__}")
    return value


def _inputs(path: Path, doc: dict[str, Any]) -> tuple[str | ModelSpec, str | ClusterSpec, Constants | None]:
    """The embedded model, cluster and constants specs, or the names older documents record."""
    inputs = _object(path, doc, "inputs", None)
    if inputs is not None:
        where = f"{path}: inputs"
        given = inputs.get("constants")
        constants = parse_spec(Constants, _mapping(given), where=f"{where}.constants") if given is not None else None
        return (parse_spec(ModelSpec, _mapping(inputs.get("model")), where=f"{where}.model"),
                parse_spec(ClusterSpec, _mapping(inputs.get("cluster")), where=f"{where}.cluster"), constants)
    names = (doc.get("model"), doc.get("cluster"))
    if not all(isinstance(name, str) for name in names):
        raise InputFileError(f"{path}: 'model' and 'cluster' must name a catalog entry or a file")
    return str(names[0]), str(names[1]), None


def _mapping(value: Any) -> dict[str, Any]:
    """A JSON object, or an empty one (which validation then reports as missing every field)."""
    return value if isinstance(value, dict) else {}


def _plan_train(doc: dict[str, Any]) -> dict[str, Any]:
    """An older plan records its global batch as sequences and tokens, hence the sequence length."""
    batch = doc.get("global_batch")
    if not isinstance(batch, dict) or not isinstance(batch.get("sequences"), int):
        return {}
    sequences, tokens = batch["sequences"], batch.get("tokens")
    train: dict[str, Any] = {"global_batch": sequences}
    if isinstance(tokens, int) and sequences and tokens % sequences == 0:
        train["seq_len"] = tokens // sequences
    return train
