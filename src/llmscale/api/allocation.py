"""The API of `llmscale allocate`: which model and how many tokens for a cluster and a deadline (or a FLOP budget),
through scaling.allocate, with the "3× compute" decomposition on request. Returns the command's document.

Defaults: the flagship cluster (seed-500k) for 90 days, dense and MoE candidates plus the flagship model
(seed-10t-moe), Krajewski et al.'s law (the one that scores dense and MoE on one scale). `flops` with no cluster and
no gpus answers the pure compute-optimal question (the classic dense one unless family/law say otherwise:
Besiroglu et al.'s constants, arXiv:2404.10102, whose refit agrees with Hoffmann et al.'s Approaches 1-2 where
Hoffmann's own Approach-3 constants do not).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmscale.api.checks import flag_arg, names_arg, path_arg, ref_arg, text_arg
from llmscale.api.jobs import ClusterRef, choice, whole, within
from llmscale.api.results import Document
from llmscale.errors import SpecError
from llmscale.io.resolve import (
    DEFAULT_MODEL,
    JobRequest,
    check_sha256,
    constants_if_changed,
    resolve_model,
    resolve_setting,
)
from llmscale.report.allocate_html import allocation_document, pure_document
from llmscale.scaling.allocate import AllocationResult, JobPolicy, Request, default_law, pure_optimum
from llmscale.scaling.allocate import allocate as allocate_models
from llmscale.scaling.family import Family, candidates
from llmscale.scaling.laws import ModelScale, ScalingLaw, moe_fit, predict_loss
from llmscale.scaling.multiplier import Decomposition, decompose
from llmscale.scaling.optimum import default_unique_tokens
from llmscale.specs.bounds import MAX_DAYS, MIN_DAYS
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.fingerprint import canonical_json, spec_document
from llmscale.specs.train import Precision

DEFAULT_DAYS = 90.0
DENSE_ONLY = (ScalingLaw.CHINCHILLA, ScalingLaw.BESIROGLU)


def resolve_law(family: Family | None, law: ScalingLaw | None, pure: bool) -> tuple[Family, ScalingLaw]:
    """Fill in whichever of family and law is missing; refuse a dense-only law for MoE candidates."""
    if family is None:
        family = Family.DENSE if (law in DENSE_ONLY or (law is None and pure)) else Family.BOTH
    if law is None:
        law = default_law(family is not Family.DENSE)
    if family is not Family.DENSE and law in DENSE_ONLY:
        raise SpecError("law", law.value, f"has no mixture-of-experts term; use --law krajewski or --family dense "
                                          f"(family is {family.value})")
    return family, law


def allocate(cluster: ClusterRef = None, gpus: int | None = None, *, days: float | None = None,
             flops: float | None = None, family: Family | str | None = None, law: ScalingLaw | str | None = None,
             unique_tokens: float | None = None, models: Iterable[str] = (),
             precision: Precision | str = Precision.BF16, seq_len: int | None = None,
             job_size: JobPolicy | str = JobPolicy.FASTEST, explain_3x: bool = False,
             calibration: Path | None = None, expect_sha256: str | None = None,
             on_model: Callable[[int, int, str], None] | None = None) -> Document:
    """Candidates → best layout each → tokens by the deadline → predicted loss (module docstring); `to_frame()`:
    one row per candidate. unique_tokens: the unique data a run may draw on (`--max-tokens`; None: the catalog's
    default, `laws.default_unique_tokens`); beyond it the run repeats data, scored with Muennighoff et al.'s law."""
    _check_arguments(cluster, gpus, days, flops, unique_tokens, models, seq_len, explain_3x, calibration,
                     expect_sha256, on_model)
    if days is not None and flops is not None:
        raise SpecError("days/flops", (days, flops), "give days or flops, not both")
    fam, chosen_law = resolve_law(None if family is None else choice(Family, family, "family"),
                                  None if law is None else choice(ScalingLaw, law, "law"),
                                  flops is not None and cluster is None and gpus is None)
    if flops is not None and cluster is None and gpus is None:
        if explain_3x:
            raise SpecError("explain_3x", True, "need a cluster: give one")
        if not 0 < flops < float("inf"):
            raise SpecError("flops", flops, "must be a positive, finite number of FLOPs")
        return Document(pure_document(chosen_law, flops, pure_optimum(chosen_law, flops, fam is not Family.DENSE)))
    precision = choice(Precision, precision, "precision")
    setting = resolve_setting(JobRequest(cluster=cluster, gpus=gpus, train={"precision": precision,
                                                                          "seq_len": 4096 if seq_len is None
                                                                          else seq_len},
                                         calibration=calibration))
    extras = tuple(str(m) for m in names_arg("models", models)) or ((DEFAULT_MODEL,) if fam is not Family.DENSE else ())
    names = candidates(fam, extras)
    unique = unique_tokens if unique_tokens is not None else default_unique_tokens()[0]
    request = Request(setting.cluster, chosen_law, setting.constants,
                      days=None if flops is not None else (DEFAULT_DAYS if days is None else days), flops=flops,
                      gpus=gpus, unique_tokens=unique,
                      precision=precision, seq_len=setting.train.seq_len,
                      policy=choice(JobPolicy, job_size, "job_size"))
    check_sha256(_digest(request, names, setting.constants), expect_sha256)
    result = allocate_models(names, request, on_model)
    decomposition = _decompose(result, extras, request) if explain_3x else None
    document = allocation_document(result, _digest(request, names, setting.constants), fam.value, list(extras),
                                   decomposition, _sensitivity(result, list(extras)),
                                   "given" if unique_tokens is not None else default_unique_tokens()[1])
    return Document(document, rows_key="candidates")


def _check_arguments(cluster: Any, gpus: Any, days: Any, flops: Any, unique_tokens: Any, models: Any, seq_len: Any,
                     explain_3x: Any, calibration: Any, expect_sha256: Any, on_model: Any) -> None:
    """Each argument of `allocate` is of a type it takes (api.checks), or one SpecError names it."""
    ref_arg("cluster", cluster, ClusterSpec)
    whole("gpus", gpus)
    whole("seq_len", seq_len)
    for name, value in (("flops", flops), ("unique_tokens", unique_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise SpecError(name, value, "a number or None")
    within("days", days, MIN_DAYS, MAX_DAYS)  # as the CLI's --days
    bad = next((m for m in names_arg("models", models) if not isinstance(m, str | Path)), None)
    if bad is not None:
        raise SpecError("models", bad, "a catalog model name or a file path")
    flag_arg("explain_3x", explain_3x)
    path_arg("calibration", calibration)
    text_arg("expect_sha256", expect_sha256)
    if on_model is not None and not callable(on_model):
        raise SpecError("on_model", on_model, "a function (index, count, name) or None")


def _digest(request: Request, models: list[Any], constants: Any) -> str:
    """SHA256 of the canonical inputs: cluster, candidate models, the request, changed constants."""
    changed = constants_if_changed(constants)
    return hashlib.sha256(canonical_json({
        **spec_document(cluster=request.cluster), "models": [spec_document(model=m)["model"] for m in models],
        "request": {"law": request.law.value, "days": request.days, "flops": request.flops, "gpus": request.gpus,
                    "unique_tokens": request.unique_tokens, "precision": request.precision.value,
                    "seq_len": request.seq_len, "job_size": request.policy.value},
        **({"constants": changed.model_dump(mode="json")} if changed else {})}).encode("ascii")).hexdigest()


def _decompose(result: AllocationResult, extras: tuple[str, ...], request: Request) -> Decomposition | None:
    """The 3× levers for the first compared model (default the flagship), at the tokens it reached."""
    name = extras[0] if extras else DEFAULT_MODEL
    outcome = result.outcome(name)
    spec = outcome.model if outcome is not None else resolve_model(name)
    tokens = outcome.tokens if outcome is not None and outcome.feasible else 0.0
    return decompose(spec, request.cluster, tokens or 20.0 * ModelScale.of(spec).active_params, request.constants,
                     request.seq_len)


def _sensitivity(result: AllocationResult, compared: list[str]) -> dict[str, float]:
    """Loss gap of each compared MoE model to the recommendation under Krajewski's E = 16 refit instead."""
    best, law = result.best, result.request.law
    if best is None or law is not ScalingLaw.KRAJEWSKI:
        return {}
    refit, unique = moe_fit(16), result.request.unique_tokens
    out = {}
    for name in compared:
        o_ = result.outcome(name)
        if o_ is not None and o_.feasible and o_.scale.is_moe and o_ is not best:
            out[name] = (predict_loss(law, o_.scale, o_.tokens, unique, refit)
                         - predict_loss(law, best.scale, best.tokens, unique, refit))
    return out
