"""The built-in catalog (GPUs, clusters, models, model constants) shipped as YAML inside `llmscale/catalog/`, and
the loaders that turn a `--model` / `--cluster` argument — a catalog name or a file path — into a spec."""

from __future__ import annotations

import re
from enum import Enum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from llmscale.errors import CatalogError, InputFileError, SpecError
from llmscale.io.files import parse_spec, read_document
from llmscale.io.standard import is_standard_ref, standard_entry
from llmscale.specs.cluster import ClusterSpec, GPUSpec
from llmscale.specs.constants import Constants
from llmscale.specs.framework import Framework, FrameworkSupport
from llmscale.specs.model import ModelSpec
from llmscale.specs.record import PublishedMfu


class Kind(str, Enum):
    """A section of the catalog."""

    MODELS = "models"
    GPUS = "gpus"
    CLUSTERS = "clusters"


_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (~10× faster on the catalog); the catalog is ours, so the
pure-Python loader's friendlier error marks are kept for users' files (io.files)."""


@cache
def catalog_text(filename: str) -> str:
    """One file of the built-in catalog, as text (read once per process)."""
    return resources.files("llmscale.catalog").joinpath(filename).read_text(encoding="utf-8")


def load_catalog_yaml(text: str) -> Any:
    """Catalog YAML text (a file or a part of one), parsed with the fast loader."""
    return yaml.load(text, Loader=_FAST_LOADER)


@cache
def catalog_file(filename: str) -> Any:
    """One YAML file of the built-in catalog, parsed (read once per process; callers must not modify it)."""
    return load_catalog_yaml(catalog_text(filename))


_TOP_LEVEL_KEY = re.compile(r"^[A-Za-z_][\w-]*:", re.MULTILINE)


@cache
def catalog_section(filename: str, key: str) -> str:
    """The text of one top-level key of a catalog YAML file, from its line to the next top-level key, for a reader
    that parses only what it needs (io.releases: frameworks.yaml is 209 KB, ~30 ms to parse whole)."""
    text = catalog_text(filename)
    start = re.search(rf"^{re.escape(key)}:", text, re.MULTILINE)
    if start is None:
        raise KeyError(f"catalog {filename} has no top-level key {key!r}")
    end = _TOP_LEVEL_KEY.search(text, start.end())
    return text[start.start():end.start() if end is not None else len(text)]


@cache
def dataset_file(filename: str) -> Any:
    """One YAML file of the published-runs data shipped inside `llmscale/data/`, parsed (read once per process)."""
    text = resources.files("llmscale.data").joinpath(filename).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_FAST_LOADER)


def catalog_values(filename: str) -> dict[str, Any]:
    """The `value` of every entry of a catalog constants file (`key: {value: …, source: …}`: memory.yaml,
    comm.yaml, …); each entry's `source` stays in the file."""
    return {key: entry["value"] for key, entry in catalog_file(filename).items()}


def _entries(kind: Kind) -> dict[str, dict[str, Any]]:
    data = catalog_file(f"{kind.value}.yaml")
    assert isinstance(data, dict), f"catalog {kind.value}.yaml must be a mapping"
    return data


def names(kind: Kind) -> list[str]:
    return list(_entries(kind))


def entry(kind: Kind, name: str) -> dict[str, Any]:
    """The raw catalog mapping for `name`, with its name filled in."""
    entries = _entries(kind)
    if name not in entries:
        raise CatalogError(
            f"unknown {kind.value[:-1]} {name!r}; catalog {kind.value}: {', '.join(entries)} "
            "(or give a path to a YAML/JSON file)"
        )
    return {"name": name, **entries[name]}


def _is_path(ref: str) -> bool:
    return Path(ref).suffix.lower() in {".yaml", ".yml", ".json"} or "/" in ref or Path(ref).exists()


def _default_efficiency() -> dict[str, Any]:
    defaults: dict[str, Any] = catalog_file("efficiency.yaml")["default"]
    return defaults


def _with_efficiency(gpu: dict[str, Any], where: str = "", field: str = "efficiency") -> dict[str, Any]:
    """Fill the GPU's `efficiency` from catalog/efficiency.yaml, keeping any fields the entry gives; an
    `fp8_attention` that names a measured set of that file (its `fp8_attention` key) becomes the set's tables."""
    given = gpu.get("efficiency")
    if given is not None and not isinstance(given, dict):
        return gpu  # let validation report the wrong type
    efficiency = {**_default_efficiency(), **(given or {})}
    named = efficiency.get("fp8_attention")
    if isinstance(named, str):
        sets: dict[str, Any] = catalog_file("efficiency.yaml")["fp8_attention"]
        if named not in sets:
            raise SpecError(f"{field}.fp8_attention", named, f"a measured set of catalog/efficiency.yaml: "
                            f"{', '.join(sets)}, or a list of tables", where=where)
        efficiency["fp8_attention"] = sets[named]["tables"]
    return {**gpu, "efficiency": efficiency}


def _failures_catalog() -> dict[str, Any]:
    data: dict[str, Any] = catalog_file("failures.yaml")
    return data


def failure_profile(name: str | None = None) -> dict[str, Any]:
    """A failure profile of catalog/failures.yaml as a mapping (the default profile when `name` is None)."""
    catalog = _failures_catalog()
    name = name or catalog["default"]
    profiles: dict[str, Any] = catalog["profiles"]
    if name not in profiles:
        raise CatalogError(f"unknown failure profile {name!r}; catalog failures: {', '.join(profiles)}")
    return {"name": name, **profiles[name]}


STANDARD_FILE = "standard_clusters.yaml"
"""The standard topologies of `--cluster GPU:COUNT` (io.standard)."""

CONSTANTS_FILES = {"step": "step.yaml", "memory": "memory.yaml", "comm": "comm.yaml", "moe": "moe.yaml",
                   "checkpoint": "checkpoint.yaml", "search": "plan.yaml"}
"""The catalog file of each component of `specs.constants.Constants`."""


def load_constants() -> Constants:
    """The catalog's model constants (`specs.constants.Constants`): each component's file, the mitigations and the
    default failure profile of failures.yaml. A fresh, validated object on every call (nothing cached but the files)."""
    raw: dict[str, Any] = {component: catalog_values(name) for component, name in CONSTANTS_FILES.items()}
    raw["mitigations"] = _failures_catalog()["mitigations"]
    raw["failures"] = failure_profile()
    return Constants.model_validate(raw)


def _with_failures(cluster: dict[str, Any], where: str) -> dict[str, Any]:
    """Fill the cluster's `failures`: absent -> the default profile; a name -> that profile; a mapping -> merged over
    the profile its `name` gives (or the default)."""
    given = cluster.get("failures")
    if given is not None and not isinstance(given, str | dict):
        return cluster  # let validation report the wrong type
    try:
        if isinstance(given, dict):
            base = failure_profile(given["name"]) if given.get("name") in _failures_catalog()["profiles"] else (
                failure_profile())
            return {**cluster, "failures": {**base, **given}}
        return {**cluster, "failures": failure_profile(given)}
    except CatalogError as exc:
        raise InputFileError(f"{where}: failures: {exc}") from None


def load_frameworks() -> dict[Framework, FrameworkSupport]:
    """What each training framework runs (catalog/frameworks.yaml), by framework."""
    data: dict[str, Any] = load_catalog_yaml(catalog_section("frameworks.yaml", "engines"))["engines"]
    supports = [parse_spec(FrameworkSupport, {"name": name, **body}, where=f"catalog frameworks.yaml engines.{name}")
                for name, body in data.items()]
    return {s.name: s for s in supports}


def load_published_mfu() -> PublishedMfu:
    """The best published MFU per generation and precision (catalog/published_mfu.yaml)."""
    return parse_spec(PublishedMfu, catalog_file("published_mfu.yaml"), where="catalog published_mfu.yaml")


def load_gpu(ref: str) -> GPUSpec:
    if _is_path(ref):
        return parse_spec(GPUSpec, _with_efficiency(read_document(Path(ref)), ref), where=ref)
    where = f"catalog gpu {ref}"
    return parse_spec(GPUSpec, _with_efficiency(entry(Kind.GPUS, ref), where), where=where)


def load_model(ref: str) -> ModelSpec:
    """A catalog model name, a llmscale YAML/JSON model file, or a Hugging Face config.json."""
    if not _is_path(ref):
        return parse_spec(ModelSpec, entry(Kind.MODELS, ref), where=f"catalog model {ref}")
    path = model_file(Path(ref))
    data = read_document(path)
    from llmscale.io.hfconfig import hf_model_name, is_hf_config, model_from_hf_config

    if is_hf_config(data):
        return model_from_hf_config(data, name=hf_model_name(data, path), where=str(path))
    return parse_spec(ModelSpec, data, where=str(path))


def model_file(path: Path) -> Path:
    """A model file, or the config.json of a Hugging Face snapshot folder given in its place."""
    try:
        if not path.is_dir():
            return path
        config = path / "config.json"
        found = config.is_file()
    except OSError:  # a name too long and the like: reading it says what is wrong (io.strict)
        return path
    if not found:
        raise InputFileError(f"{path}: is a directory without config.json; give a llmscale YAML/JSON model file, a "
                             "Hugging Face config.json or the snapshot folder that holds one")
    return config


def load_cluster(ref: str, num_gpus: int | None = None) -> ClusterSpec:
    """A catalog cluster name, a standard cluster `GPU:COUNT` (io.standard) or a YAML/JSON cluster file; `gpu` may
    name a catalog GPU.
    `num_gpus` overrides the cluster's GPU count (a job on part of the cluster)."""
    if _is_path(ref):
        data, where = read_document(Path(ref)), ref
    elif is_standard_ref(ref):
        data, where = standard_entry(ref, catalog_file(STANDARD_FILE), names(Kind.GPUS), lambda g: entry(Kind.GPUS, g),
                                     lambda c: entry(Kind.CLUSTERS, c)), f"standard cluster {ref}"
    else:
        data, where = entry(Kind.CLUSTERS, ref), f"catalog cluster {ref}"
    gpu = data.get("gpu")
    if isinstance(gpu, str):
        try:
            gpu = entry(Kind.GPUS, gpu)
        except CatalogError as exc:
            raise InputFileError(f"{where}: gpu: {exc}") from None
    if isinstance(gpu, dict):
        data = {**data, "gpu": _with_efficiency(gpu, where, "gpu.efficiency")}
    if num_gpus is not None:
        data = {**data, "num_gpus": num_gpus}
    return parse_spec(ClusterSpec, _with_failures(data, where), where=where)


@cache
def _gpu_keys() -> dict[str, str]:
    """Catalog GPU key by display name (`H100-SXM5-80GB` → `h100-sxm`)."""
    return {body["name"]: key for key, body in _entries(Kind.GPUS).items()}


def gpu_key(gpu: GPUSpec) -> str | None:
    """The catalog key of a GPU spec (matched by its name), None for a GPU of the user's own."""
    return _gpu_keys().get(gpu.name)
