"""The run config: one YAML file holds the model, layout, precision, optimizer and schedule, batch, data, seed,
checkpoint tiers and restart policy of a training run (issue 15 §1), every field bounded. `config_sha256` = SHA256 of
the canonical resolved config (`specs.fingerprint.canonical_json`); `seed_from_plan` seeds one from a saved plan.
Imports without torch. Why the canonical hash: docs/runtime.md#runtime-config.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from llmscale.errors import SpecError
from llmscale.io.files import read_document
from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.fingerprint import canonical_json

MAX_USER_BYTES = 1 << 20
"""The `user:` section's size limit as JSON (a settings block, not a data file)."""
AUTO = "auto"
"""An interval chosen by the runtime from llmscale's two-tier goodput model after the first saves (session.py)."""


class ExampleModel(Spec):
    """The example's small GPT (runtime/example/model.py)."""

    vocab_size: int | None = Field(None, ge=2, le=2**20, description="None: the distinct characters of the corpus")
    n_layer: int = Field(4, ge=1, le=64)
    n_head: int = Field(4, ge=1, le=64)
    d_model: int = Field(128, ge=8, le=8192, description="a multiple of n_head")
    seq_len: int = Field(64, ge=8, le=65536)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _heads_divide(self) -> ExampleModel:
        if self.d_model % self.n_head:
            raise FieldProblem("d_model", self.d_model, f"must be a multiple of n_head ({self.n_head})")
        return self


CatalogModel = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._/-]+$")]
"""A catalog model name (llmscale's models.yaml), used for planning and prediction only."""


def _model_kind(value: Any) -> str:
    return "name" if isinstance(value, str) else "dims"


ModelField = Annotated[Annotated[ExampleModel, Tag("dims")] | Annotated[CatalogModel, Tag("name")],
                       Discriminator(_model_kind)]


class LayoutConfig(Spec):
    """The parallel layout the trainer runs: data parallel only (the example replicates the model)."""

    dp: int = Field(1, ge=1, le=100_000)


class OptimizerConfig(Spec):
    name: Literal["adamw"] = "adamw"
    lr: float = Field(1e-3, gt=0.0, le=1.0)
    betas: tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]] = (0.9, 0.95)
    weight_decay: float = Field(0.1, ge=0.0, le=1.0)
    grad_clip: float = Field(1.0, ge=0.0, le=1e6, description="max gradient norm; 0 = no clipping")


class ScheduleConfig(Spec):
    warmup_steps: int = Field(20, ge=0, le=10**9)
    total_steps: int = Field(300, ge=1, le=10**9)
    decay: Literal["cosine", "linear", "constant"] = "cosine"
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _warmup_fits(self) -> ScheduleConfig:
        if self.warmup_steps > self.total_steps:
            raise FieldProblem("warmup_steps", self.warmup_steps, f"at most total_steps ({self.total_steps})")
        return self


class BatchConfig(Spec):
    micro_batch_size: int = Field(8, ge=1, le=10**6, description="sequences per rank per micro-batch")
    global_batch_size: int = Field(16, ge=1, le=10**9, description="sequences per step over all ranks")


class DataConfig(Spec):
    path: str | None = Field(None, min_length=1, max_length=4096,
                             description="a UTF-8 text file; None = the corpus shipped in runtime/example/")
    resumable: bool = Field(True, strict=True,
                            description="the loader has state_dict()/load_state_dict() and a resume continues at its "
                                        "position; false: a resume restarts the loader (other batches)")


class CheckpointConfig(Spec):
    dir: str | None = Field(None, min_length=1, max_length=4096, description="None = RUN_DIR/checkpoints")
    memory_every_steps: int | str = Field("auto", description="shared-memory snapshot interval; 'auto' or >= 1")
    storage_every_steps: int | str = Field("auto", description="DCP storage save interval; 'auto' or >= 1")
    keep: int = Field(2, ge=2, le=1000, description="committed storage checkpoints kept (at least two)")
    save_timeout_s: float = Field(600.0, gt=0.0, le=86_400.0,
                                  description="a save not finished after this long means a dead checkpoint process")
    auto_first_storage_step: int = Field(10, ge=1, le=10**9,
                                         description="with 'auto': the step of the first (measuring) storage save")

    @model_validator(mode="after")
    def _intervals(self) -> CheckpointConfig:
        for name in ("memory_every_steps", "storage_every_steps"):
            value = getattr(self, name)
            if value != AUTO and (isinstance(value, str) or not 1 <= value <= 10**9):
                raise FieldProblem(name, value, "'auto' or a whole number of steps from 1 to 10⁹")
        return self


class RestartConfig(Spec):
    max_attempts: int = Field(10, ge=1, le=100_000)
    max_attempts_without_progress: int = Field(3, ge=1, le=100_000)
    heartbeat_timeout_s: float = Field(60.0, gt=0.0, le=86_400.0,
                                       description="heartbeat deadline while training (files.BeatPhase.TRAIN)")
    phase_timeout_s: float = Field(300.0, gt=0.0, le=86_400.0,
                                   description="heartbeat deadline before the first heartbeat and in the startup, "
                                               "restore and checkpoint phases (a blocking storage save)")
    assumed_mtbf_s: float = Field(3600.0, gt=0.0, le=1e9, description="job MTBF the 'auto' intervals assume")
    assumed_restart_s: float = Field(30.0, ge=0.0, le=1e6,
                                     description="restart time the 'auto' intervals assume before one is measured")
    memory_share_recoverable: float = Field(0.9, ge=0.0, le=1.0,
                                            description="share of interruptions the memory tier recovers")
    backoff_s: float = Field(0.5, ge=0.0, le=3600.0,
                             description="wait before the n-th consecutive attempt without progress: backoff_s × "
                                         "2^(n−1), at most 16 × backoff_s")


class RunConfig(Spec):
    """One training run (module docstring)."""

    name: str = Field(..., min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    model: ModelField = Field(default_factory=ExampleModel)
    layout: LayoutConfig = Field(default_factory=LayoutConfig)
    precision: Literal["fp32", "bf16"] = "fp32"
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    seed: int = Field(1234, ge=0, le=2**31 - 1)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    nproc_per_node: int = Field(1, ge=1, le=1024)
    hosts: str | None = Field(None, min_length=1, max_length=4096, description="a hostfile (runtime/hosts.py)")
    user: dict[str, Any] | None = Field(None, description="the training script's own settings, passed to it "
                                                          "untouched (RunConfig.user) and hashed with the rest")

    @model_validator(mode="after")
    def _user_is_plain(self) -> RunConfig:
        if self.user is not None:
            try:
                canonical = json.dumps(self.user, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise FieldProblem("user", "…", "plain values only: mappings with text keys, lists, text, finite "
                                   f"numbers, true/false, null ({exc})") from None
            if len(canonical) > MAX_USER_BYTES:
                raise FieldProblem("user", f"{len(canonical)} bytes", f"at most {MAX_USER_BYTES} bytes as JSON")
        return self

    @model_validator(mode="after")
    def _layout_matches(self) -> RunConfig:
        if self.hosts is None and self.layout.dp != self.nproc_per_node:
            raise FieldProblem("layout.dp", self.layout.dp,
                               f"must equal the world size, nproc_per_node ({self.nproc_per_node}), on one host")
        per_step = self.batch.micro_batch_size * self.layout.dp
        if self.batch.global_batch_size % per_step:
            raise FieldProblem("batch.global_batch_size", self.batch.global_batch_size,
                               f"a multiple of micro_batch_size × dp ({self.batch.micro_batch_size} × "
                               f"{self.layout.dp} = {per_step})")
        return self

    @property
    def grad_accum_steps(self) -> int:
        return self.batch.global_batch_size // (self.batch.micro_batch_size * self.layout.dp)

    @property
    def example_model(self) -> ExampleModel:
        """The trainable model dims; a catalog name is for planning only and trains nothing."""
        if isinstance(self.model, str):
            raise SpecError("model", self.model, "a catalog model is for planning; the trainer needs dims "
                            "(n_layer, n_head, d_model, seq_len)")
        return self.model


ADDED_DEFAULTS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("user",), None), (("data", "resumable"), True), (("restart", "backoff_s"), 0.5))
"""Keys added after run directories existed: hashed only when set away from their default, so those directories
resume under the hash they were launched with."""


def config_sha256(cfg: RunConfig) -> str:
    """SHA256 (hex) of the canonical resolved config (module docstring; ADDED_DEFAULTS)."""
    document = cfg.model_dump(mode="json")
    for path, default in ADDED_DEFAULTS:
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if parent.get(path[-1]) == default and type(parent.get(path[-1])) is type(default):
            del parent[path[-1]]
    return hashlib.sha256(canonical_json(document).encode("ascii")).hexdigest()


def parse_config(data: dict[str, Any], where: str = "run config") -> RunConfig:
    """Validate a mapping; the first problem is one SpecError (field, value, allowed)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise _spec_error(exc, where) from None


def load_config(path: Path) -> RunConfig:
    """A run YAML (or JSON) file, read strictly (io.strict) and validated."""
    return parse_config(read_document(path), where=str(path))


def _spec_error(exc: ValidationError, where: str) -> SpecError:
    """pydantic's first error (an unknown key first: a misspelling also makes the real field missing) as one line;
    the union tags of `model` are left out of the field path."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(part) for part in err["loc"] if part not in ("dims", "name") or part == err["loc"][0]]
    problem = (err.get("ctx") or {}).get("error")
    if isinstance(problem, FieldProblem):
        return SpecError(".".join([*loc, problem.field]), problem.value, problem.allowed, where=where)
    field, value, message = ".".join(loc) or "(config)", err.get("input"), str(err["msg"])
    if err["type"] == "extra_forbidden":
        allowed = _keys_at(loc[:-1])
        message = "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    elif err["type"] == "missing":
        value, message = None, "required field is missing"
    elif isinstance(value, dict | list):
        value = "…"
    return SpecError(field, value, message.removeprefix("Value error, "), where=where)


def _keys_at(path: list[str]) -> list[str]:
    spec: type[Spec] | None = RunConfig
    for part in path:
        info = spec.model_fields.get(part) if spec is not None else None
        spec = ExampleModel if part == "model" else _spec_class(info.annotation if info else None)
    return sorted(spec.model_fields) if spec is not None else []


def _spec_class(annotation: Any) -> type[Spec] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, Spec) else None


def seed_from_plan(path: Path) -> dict[str, Any]:
    """The part of a run config a saved `llmscale plan --json` (or explain) document seeds: its catalog model,
    its layout's dp and its micro/global batch. Merge it under a config's own keys; the rest keeps its defaults."""
    from llmscale.io.saved import read_saved

    job = read_saved(path)
    model = job.model if isinstance(job.model, str) else job.model.name
    seed: dict[str, Any] = {"model": model}
    dp = job.layout.get("dp")
    if isinstance(dp, int) and not isinstance(dp, bool):
        seed["layout"] = {"dp": dp}
        seed["nproc_per_node"] = dp
    batch: dict[str, Any] = {}
    if isinstance(job.layout.get("mbs"), int):
        batch["micro_batch_size"] = job.layout["mbs"]
    if isinstance(job.train.get("global_batch"), int):
        batch["global_batch_size"] = job.train["global_batch"]
    if batch:
        seed["batch"] = batch
    return seed
