"""Write the output block of docs/api.md: run docs/api_example.py and put what it prints under the doc's "Output:".
Run `python scripts/api_doc.py` after a change that moves a number the example prints; tests/test_api_doc.py fails
while the doc shows other output than the example prints (issue 28: it showed MFU 46.9 % where the code gave 46.4 %)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
EXAMPLE = ROOT / "docs" / "api_example.py"
OPENING = "Output:\n\n```\n"


def example_output() -> str:
    """What docs/api_example.py prints, run as a user would (a fresh interpreter)."""
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True, timeout=300)
    return done.stdout


def documented_output(doc: str) -> str:
    """The block under "Output:" in docs/api.md."""
    return doc.split(OPENING, 1)[1].split("```", 1)[0]


def with_output(doc: str, output: str) -> str:
    """docs/api.md with its output block replaced."""
    head, rest = doc.split(OPENING, 1)
    return head + OPENING + output + "```" + rest.split("```", 1)[1]


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(with_output(text, example_output()), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
