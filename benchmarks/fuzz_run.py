"""Run one fuzz case through `llmscale.cli.main.main(argv)` in-process and classify what came back.

Outcomes (issue 14): ok (exit 0 — or exit 3, "not runnable", from explain and the read-* commands — with finite,
non-negative outputs); error (exit 2, exactly one `error: ` line naming a field, flag or file of the case); usage
(exit 2 from typer/click's own usage box, which names the option but spans several lines); traceback (any other
exception); exit-code (any other exit code); unclear (exit 2 but more than one line, or nothing of the case named);
non-finite (NaN/Infinity in JSON or text, or a negative value where only a non-negative one makes sense);
hang (over the time limit); silent (exit 0 on input the issue says must be refused: a duplicate key, an unsealed
profile, a --from-plan contradicted by a flag, an unknown key).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import signal
import sys
import traceback
import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from fuzz_files import Case


class Outcome(str, Enum):
    OK = "ok"
    ERROR = "error"
    USAGE = "usage"
    TRACEBACK = "traceback"
    EXIT_CODE = "exit-code"
    UNCLEAR = "unclear"
    NON_FINITE = "non-finite"
    HANG = "hang"
    SILENT = "silent"


FAILURES = (Outcome.TRACEBACK, Outcome.EXIT_CODE, Outcome.UNCLEAR, Outcome.NON_FINITE, Outcome.HANG)
"""The outcomes the issue requires to be zero (silent acceptances are counted and reported besides)."""

NOT_RUNNABLE_OK = {"explain", "memory", "read-megatron", "read-torchtitan"}
NON_NEGATIVE = re.compile(r"(_s|_bytes|_flops|_per_s|_gib|_w|_j|_usd|_hours|_days)$|^mfu$|^goodput|^tokens_per_s")
SIGNED = re.compile(r"error|delta|diff|change|gain|slack|margin|headroom|residual|pct|ratio", re.I)
TEXT_NON_FINITE = re.compile(r"(?<![\w.])(nan|-?inf|NaN|-?Infinity)(?![\w])")
NAMED_FIELD = re.compile(r"\b(?!expression\b|value\b|input\b)[A-Za-z_][\w.\[\]-]* = .+ is invalid|'?--[a-z][\w-]+")
"""An error that names some field ("layout: tp = 8 is invalid: ...") or flag, when not one the case changed (the
mutation can make an earlier check fail first); "expression = ..." names no field."""
USAGE_NEEDLES = ("Invalid value", "No such option", "Missing", "No such command", "requires an argument",
                 "Got unexpected")
"""What click's usage box says when it refuses a flag value itself (it names the option, over several lines)."""
WARNING_LINE = re.compile(r"^(warning: |\S+\.py:\d+: \w*Warning: |  )")


class Hang(BaseException):
    """Raised by the alarm: a BaseException so that no `except Exception` in the product swallows it."""


@dataclass(frozen=True)
class Result:
    case: Case
    outcome: Outcome
    detail: str
    site: str = ""
    seconds: float = 0.0


def _site(exc: BaseException) -> str:
    """Exception type and the innermost llmscale frame (file:line), the key that groups tracebacks."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/llmscale/" in f.filename]
    where = "?"
    if frames:
        path = Path(frames[-1].filename)
        where = f"{'/'.join(path.parts[path.parts.index('llmscale'):])}:{frames[-1].lineno} {frames[-1].name}"
    return f"{type(exc).__name__} at {where}"


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"non-finite JSON token {token}")


def _bad_number(doc: Any, key: str = "") -> str:
    """The first NaN/inf anywhere, or negative value under a key that must be non-negative, as 'key=value'."""
    if isinstance(doc, dict):
        return next((b for k, v in doc.items() if (b := _bad_number(v, str(k)))), "")
    if isinstance(doc, list):
        return next((b for v in doc if (b := _bad_number(v, key))), "")
    if isinstance(doc, float) and not math.isfinite(doc):
        return f"{key}={doc}"
    if isinstance(doc, (int, float)) and not isinstance(doc, bool) and doc < 0 and NON_NEGATIVE.search(key) \
            and not SIGNED.search(key):
        return f"{key}={doc}"
    return ""


def _check_output(case: Case, out: str) -> tuple[Outcome, str]:
    if "--json" in case.argv and case.argv[0] != "export":
        try:
            doc = json.loads(out, parse_constant=_refuse_constant)
        except ValueError as exc:
            return Outcome.NON_FINITE, f"stdout is not strict JSON: {exc}"[:200]
        bad = _bad_number(doc)
        return (Outcome.NON_FINITE, bad) if bad else (Outcome.OK, "")
    for line in out.splitlines():  # a line that quotes the user's bad value back ("vocab = inf is invalid") is fine
        quoted = "is invalid" in line or line.startswith("skipped: ")  # validate's reason, wrapped or not
        if TEXT_NON_FINITE.search(line) and not quoted:
            return Outcome.NON_FINITE, f"text output: {line.strip()[:160]}"
    return Outcome.OK, ""


def _names_one(case: Case, line: str) -> bool:
    lower = line.lower()
    for raw in case.names:
        name = str(raw).lower()
        spellings = (name, name.replace("-", "_"), name.replace("_", "-"))
        if not isinstance(raw, int) and name and any(s in lower for s in spellings):
            return True
    return False


def _skipped_with_reason(case: Case, out: str) -> bool:
    """validate refuses a bad row by skipping it with the reason (the row's key named in it), not by exiting 2."""
    if case.argv[0] != "validate":
        return False
    if "--json" not in case.argv:  # the table prints each one as "skipped: NAME: REASON"
        reasons = " ".join(line for line in out.splitlines() if line.startswith("skipped:")).lower()
    else:
        try:
            skipped = json.loads(out).get("skipped", [])
        except (ValueError, AttributeError):
            return False
        reasons = " ".join(str(s.get("reason", "")) for s in skipped if isinstance(s, dict)).lower()
    return any(str(name).lower() in reasons for name in case.names if not isinstance(name, int))


def _classify_exit(case: Case, code: int, out: str, err: str) -> tuple[Outcome, str]:
    if code == 0 or (code == 3 and case.argv[0] in NOT_RUNNABLE_OK):
        outcome, detail = _check_output(case, out)
        if outcome is Outcome.OK and case.must_refuse and code == 0:
            if _skipped_with_reason(case, out):
                return Outcome.ERROR, "validate skipped the edited row with its reason"
            return Outcome.SILENT, f"accepted: {case.what}"[:200]
        return outcome, detail
    if code == 4 and case.argv[0] == "validate":  # nothing evaluated: a refusal with its own code (cli.main)
        code = 2
    if code != 2:
        return Outcome.EXIT_CODE, f"exit {code}: {err.strip()[-200:]}"
    if ("Usage:" in err or "╭─ Error" in err) and any(needle in err for needle in USAGE_NEEDLES):
        return Outcome.USAGE, " ".join(err.split())[-200:]
    lines = [line for line in err.strip().splitlines() if not WARNING_LINE.match(line)]
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return Outcome.UNCLEAR, f"{len(lines)} lines: {' | '.join(lines)[:300]}"
    if not _names_one(case, lines[0]) and not NAMED_FIELD.search(lines[0]):
        return Outcome.UNCLEAR, f"names none of {case.names}: {lines[0][:300]}"
    return Outcome.ERROR, lines[0][:300]


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _materialize(case: Case, directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in case.files:
        target = directory / name
        if content is None:
            target.mkdir(exist_ok=True)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8", errors="surrogatepass")
    return [token.replace("{d}", str(directory)) for token in case.argv]


def _call_api(case: Case) -> tuple[Outcome, str]:
    """Call the API case's function; a refusal must be one LlmscaleError naming the argument it was given."""
    import llmscale
    from llmscale.errors import LlmscaleError

    assert case.call is not None
    function, arguments = case.call
    try:
        result = getattr(llmscale, function)(**dict(arguments))
    except LlmscaleError as exc:
        text = str(exc)
        named = any(f"{n} = " in text or f"{n}:" in text for n in case.names)
        return (Outcome.ERROR, text[:300]) if named and "\n" not in text else (Outcome.UNCLEAR, text[:300])
    document = result.to_dict() if hasattr(result, "to_dict") else {}
    bad = _bad_number(document)
    if bad:
        return Outcome.NON_FINITE, bad
    return (Outcome.SILENT, f"accepted: {case.what}"[:200]) if case.must_refuse else (Outcome.OK, "")


def run_case(case: Case, directory: Path, limit_s: int) -> Result:
    """Run the case with its files in `directory` under a `limit_s` alarm and classify the outcome."""
    from llmscale.cli.main import main

    argv = _materialize(case, directory)
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            if case.call is not None:
                outcome, detail = _call_api(case)
                return Result(case, outcome, detail)
            main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        raise
    except Hang:
        return Result(case, Outcome.HANG, f"over {limit_s} s")
    except RecursionError as exc:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
        return Result(case, Outcome.TRACEBACK, str(exc)[:200], _site(exc))
    except BaseException as exc:
        return Result(case, Outcome.TRACEBACK, f"{type(exc).__name__}: {exc}"[:300], _site(exc))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    outcome, detail = _classify_exit(case, code, out.getvalue(), err.getvalue())
    return Result(case, outcome, detail)
