"""Calibration-profile files: `llmscale calibrate` writes one (`write_profile`, sealed with the SHA256 of its body);
`explain`, `memory`, `export`, `plan`, `validate` and `probe` read one with `--calibration FILE` (`load_profile`),
refusing one whose numbers or constant overrides are unknown or out of bounds, and an unsealed one — its seal
removed, or its body edited after it was written — unless the user gives `--allow-unsealed`; then a warning says so
and every document records `calibration: {sealed: false}` (`CalibrationRecord`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmscale.errors import InputFileError
from llmscale.io.catalog import load_constants
from llmscale.io.files import parse_spec, read_document, spec_error_from
from llmscale.specs.calibration import CalibrationProfile


def seal(profile: CalibrationProfile) -> CalibrationProfile:
    """The profile with its body's SHA256 filled in."""
    return profile.model_copy(update={"sha256": profile.body_sha256()})


def write_profile(profile: CalibrationProfile, path: Path) -> CalibrationProfile:
    sealed = seal(profile)
    absent = {name for name in ("constants", "storage") if getattr(sealed, name) is None}
    text = yaml.safe_dump(sealed.model_dump(mode="json", exclude=absent), sort_keys=False, allow_unicode=True)
    path.write_text("# llmscale calibration profile (llmscale calibrate); edits break its sha256\n" + text,
                    encoding="utf-8")
    return sealed


class UnsealedProfileWarning(UserWarning):
    """An unsealed calibration profile is in use (`--allow-unsealed`)."""


@dataclass(frozen=True)
class CalibrationRecord:
    """Which profile calibrated a job, as its documents record it."""

    sha256: str
    """The profile's own seal when sealed, else the SHA256 of its body as it stands."""
    sealed: bool
    device: str

    @classmethod
    def of(cls, profile: CalibrationProfile) -> CalibrationRecord:
        return cls(profile.sha256 if profile.sealed and profile.sha256 else profile.body_sha256(), profile.sealed,
                   f"{profile.device.kind} ({profile.device.name})")

    def as_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "sealed": self.sealed, "device": self.device}


def load_profile(path: Path | str, allow_unsealed: bool = False) -> CalibrationProfile:
    """A validated profile; an unsealed one (no sha256, or one that does not match the body) is refused unless
    `allow_unsealed`, and then used with an `UnsealedProfileWarning`."""
    where = str(path)
    profile = parse_spec(CalibrationProfile, read_document(Path(path)), where=where)
    check_seal(profile, where, allow_unsealed)
    if profile.constants is not None:
        try:
            load_constants().with_overrides(profile.constants)
        except ValidationError as exc:
            raise spec_error_from(exc, f"{where}: constants") from None
    return profile


def check_seal(profile: CalibrationProfile, where: str, allow_unsealed: bool) -> None:
    """Refuse an unsealed profile unless `allow_unsealed`; warn when it is allowed."""
    if profile.sealed:
        return
    if profile.sha256 is None:
        problem = "has no sha256 seal (llmscale calibrate seals every profile it writes)"
    else:
        problem = (f"sha256 {profile.sha256} does not match the profile's body ({profile.body_sha256()}): the file "
                   "was edited after it was written")
    if not allow_unsealed:
        raise InputFileError(f"{where}: {problem}; refusing an unsealed profile (re-run llmscale calibrate, or give "
                             "--allow-unsealed to use its numbers as they stand)")
    warnings.warn(f"{where}: {problem}; using it as it stands (--allow-unsealed)", UnsealedProfileWarning,
                  stacklevel=2)
