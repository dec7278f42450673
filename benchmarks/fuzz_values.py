"""Values and document mutations for the fuzz suite (benchmarks/fuzz.py): the hostile scalars of issue 14 and the
edits a fuzz case applies to a YAML/JSON document (a value replaced, a key dropped or added, a key duplicated, a
non-standard tag, deep nesting).

A mutated document is written as text by `to_text`, because several of the mutations (a literal `1.0e+400`,
a duplicate key, a tag) cannot be held by a Python dict.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import yaml

RAW = "__raw__:"
"""Prefix of a string that `to_text` writes verbatim (unquoted) into the YAML or JSON text."""

HUGE_INTS: tuple[Any, ...] = (2**63, 2**64 + 1, 10**30, -(2**63), 10**400)
"""Counts no machine holds: int64 overflow, 10^30 layers, a 400-digit integer."""

BAD_FLOATS: tuple[Any, ...] = (float("inf"), float("-inf"), float("nan"), RAW + "1.0e+400", 1e308, 1e-300, -1e-300,
                               5e-324)
"""Non-finite, overflowing-on-read, and finite-but-absurd floats."""

SMALL: tuple[Any, ...] = (0, -1, -8, 0.0, -0.5, 1, 0.5)
"""Zero, negative, fractional where a count is expected."""

WRONG_TYPES: tuple[Any, ...] = ("abc", "", [1, 2], {"a": 1}, True, False, None, "1e3", "8", [], {})
"""A string, list, mapping, bool or null where a number (or a name) is expected."""

TAGS = ("!!python/object/apply:os.getcwd []", "!custom 3", "!!binary aGVsbG8=", "!!timestamp 2001-12-14",
        "!!set {a, b}", "!!omap [a: 1]", "!!str 8", "!!float 8", "!!int 8", "!!python/name:os.system")
"""YAML tags: the standard ones (str/float/int: plain values, legal) and others (to refuse)."""

STANDARD_TAGS = ("!!str 8", "!!float 8", "!!int 8", "!!timestamp 2001-12-14")
"""timestamp: a standard YAML 1.1 tag; llmscale reads it as its text (io.strict), nothing altered."""


def vanishing(value: Any) -> bool:
    """A finite float that is no measurement in any unit (1e-300, 5e-324): a spec must refuse it (specs.base
    MIN_MAGNITUDE), as issue 28 found efficiencies of 1e-300 accepted."""
    return isinstance(value, float) and 0 < abs(value) < 1e-12


def hostile_value(rng: random.Random) -> Any:
    pool = rng.choice((HUGE_INTS, BAD_FLOATS, SMALL, WRONG_TYPES))
    return rng.choice(pool)


@dataclass(frozen=True)
class Edit:
    """One mutation of a document: what it did, the key path it touched, and whether it must be refused whatever
    the value (a duplicate key, a non-standard tag, a key that is not in the spec...)."""

    what: str
    path: tuple[str, ...]
    must_refuse: bool


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    items: list[tuple[Any, Any]] = []
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list):
        items = list(enumerate(doc))
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _names(path: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(str(k) for k in path if not isinstance(k, int))


def mutate(doc: Any, rng: random.Random, skip: tuple[str, ...] = ("source", "notes", "name"),
           strict_keys: bool = True) -> tuple[Any, Edit]:
    """The document with one random edit (the input is copied, not changed); an added key must be refused only
    where the format is strict about its keys (`strict_keys`: not an HF config.json or a saved report)."""
    doc = json.loads(json.dumps(doc))
    paths = [p for p in _paths(doc) if not (set(_names(p)) & set(skip))] or [("bogus_key",)]
    path = rng.choice(paths)
    parent, key = _parent(doc, path), path[-1]
    roll = rng.random()
    if roll < 0.7 or isinstance(parent, list):
        value = hostile_value(rng)
        parent[key] = value
        return doc, Edit(f"{'.'.join(map(str, path))} = {value!r}", path, strict_keys and vanishing(value))
    if roll < 0.85:
        del parent[key]
        return doc, Edit(f"drop {'.'.join(map(str, path))}", path, False)
    extra = rng.choice(("bogus_key", "layerz", "num_gpu", "Hidden"))
    parent[extra] = rng.choice((1, "x", None))
    return doc, Edit(f"add {extra} beside {'.'.join(map(str, path))}", (*path[:-1], extra), strict_keys)


def _raw(text: str) -> str:
    """Unquote the RAW-prefixed strings that yaml/json quoted."""
    for quote in ("'", '"'):
        while f"{quote}{RAW}" in text:
            start = text.index(f"{quote}{RAW}")
            end = text.index(quote, start + 1)
            text = text[:start] + text[start + 1 + len(RAW):end] + text[end + 1:]
    return text


def to_text(doc: Any, as_json: bool) -> str:
    """YAML (or JSON, which may carry NaN/Infinity tokens as Python's json writes them) of a document."""
    if as_json:
        return _raw(json.dumps(doc, indent=1))
    return _raw(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6))


def file_level_edit(text: str, doc: Any, rng: random.Random) -> tuple[str, Edit]:
    """A whole-file edit of a YAML mapping document: duplicate a top-level key, tag a value, nest deeply, empty
    the file, write bytes that are not YAML, or add an alias bomb (issue 28: nine levels hung `show model`)."""
    keys = [k for k in doc if isinstance(doc, dict) and not isinstance(doc[k], (dict, list))] or ["name"]
    key = str(rng.choice(keys))
    roll = rng.randrange(7)
    if roll == 6:
        levels = rng.choice((3, 6, 9, 12))
        bomb = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"] + [
            f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
        return text + "\n".join(bomb) + "\n", Edit(f"alias bomb of {levels} levels", ("a0",), True)
    if roll == 0:
        value = doc.get(key) if isinstance(doc, dict) else None
        other = json.dumps(value * 2 if isinstance(value, (int, float)) and not isinstance(value, bool) else "other")
        return f"{text}{key}: {other}\n", Edit(f"duplicate key {key}", (key,), True)
    if roll == 1:
        tag = rng.choice(TAGS)
        lines = [line for line in text.splitlines() if not line.startswith(f"{key}:")]
        refuse = tag not in STANDARD_TAGS
        return "\n".join([*lines, f"{key}: {tag}"]) + "\n", Edit(f"{key}: {tag}", (key,), refuse)
    if roll == 2:
        depth = rng.choice((200, 2000, 20000))
        return f"{text}{key}_deep: {'[' * depth}{']' * depth}\n", Edit(f"nesting depth {depth}", (f"{key}_deep",),
                                                                     True)
    if roll == 3:
        return "", Edit("empty file", (), True)
    if roll == 4:
        return rng.choice(("- 1\n- 2\n", "just a string\n", "null\n", "42\n", "{a: [1, 2\n", "\t- x:\n  y")), \
            Edit("not a mapping / malformed", (), True)
    junk = "".join(chr(rng.choice((0, 7, 27, 0xFFFE, 0xD7FF, 0x85))) for _ in range(20))
    return junk + text, Edit("control characters", (), True)
