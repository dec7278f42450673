"""Calibration-profile files: `llmscale calibrate` writes one (`write_profile`, sealed with the SHA256 of its body);
`explain`, `plan`, `validate` and `probe` read one with `--calibration FILE` (`load_profile`), refusing a profile
edited after it was written and one whose constant overrides are unknown or out of bounds.
"""

from __future__ import annotations

from pathlib import Path

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
    absent = {"constants"} if sealed.constants is None else set()
    text = yaml.safe_dump(sealed.model_dump(mode="json", exclude=absent), sort_keys=False, allow_unicode=True)
    path.write_text("# llmscale calibration profile (llmscale calibrate); edits break its sha256\n" + text,
                    encoding="utf-8")
    return sealed


def load_profile(path: Path | str) -> CalibrationProfile:
    """A validated profile; one that was edited after writing (sha256 mismatch) is refused."""
    where = str(path)
    profile = parse_spec(CalibrationProfile, read_document(Path(path)), where=where)
    if profile.sha256 is not None and profile.sha256 != profile.body_sha256():
        raise InputFileError(f"{where}: sha256 {profile.sha256} does not match the profile's body "
                             f"({profile.body_sha256()}): the file was edited after it was written "
                             "(re-run llmscale calibrate, or delete the sha256 line to accept the edit)")
    if profile.constants is not None:
        try:
            load_constants().with_overrides(profile.constants)
        except ValidationError as exc:
            raise spec_error_from(exc, f"{where}: constants") from None
    return profile
