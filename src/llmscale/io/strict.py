"""Reading a user's file strictly: one line naming the path for every file-system problem, and YAML/JSON parsed so
that nothing in the file is silently dropped or reinterpreted (duplicate keys, non-core YAML tags, NaN/Infinity,
files over `MAX_FILE_BYTES`, nesting over `MAX_DEPTH` and alias bombs over `MAX_VALUES` are refused).
The rules and why: docs/design-notes.md#io-strict.
"""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path
from typing import Any

import yaml

from llmscale.errors import InputFileError

MAX_FILE_BYTES = 16 * 2**20
"""16 MiB: the largest input file read. The shipped published-runs dataset, the largest input llmscale knows, is
under 200 KiB; a file a thousand times larger is not a spec."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted (a cluster file, the deepest spec, nests four levels)."""

MAX_VALUES = 1_000_000
"""Most values (mappings, lists and scalars, aliases counted each time they appear) in one document: the shipped
published-runs dataset holds ~10⁴."""

_ERRNO_TEXT = {
    errno.ENOENT: "no such file",
    errno.EISDIR: "is a directory, not a file",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENAMETOOLONG: "file name too long",
    errno.ELOOP: "too many levels of symbolic links",
}

_TAG = "tag:yaml.org,2002:"
_ALLOWED_TAGS = frozenset(_TAG + name for name in ("str", "int", "float", "bool", "null", "map", "seq", "merge"))


def read_text(path: Path) -> str:
    """The UTF-8 text of a file; any problem is one InputFileError naming the path."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        reason = _ERRNO_TEXT.get(exc.errno or 0, f"cannot read ({exc.strerror or exc})")
        raise InputFileError(f"{path}: {reason}") from None
    except ValueError as exc:  # an embedded NUL byte in the name
        raise InputFileError(f"{path!r}: not a usable file name ({exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputFileError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB, the largest input file read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def parse_text(text: str, where: str, as_json: bool) -> Any:
    """The data of a YAML or JSON text, strictly (module docstring); a problem is one InputFileError."""
    try:
        data = _parse_json(text) if as_json else _parse_yaml(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{where}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputFileError(f"{where}: malformed YAML{at}: {problem}") from None
    except _Refused as exc:
        raise InputFileError(f"{where}: {exc}") from None
    except RecursionError:
        raise InputFileError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise InputFileError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if depth < 0:
        raise InputFileError(f"{where}: more than {MAX_VALUES:,} values once its YAML aliases are expanded (an alias "
                             "bomb?); write the values out, or use fewer aliases")
    return data


def nesting_depth(data: Any) -> int:
    """Levels of mappings and lists in `data` (a scalar: 0), walked without recursion; -1 when the walk passes
    MAX_VALUES values (aliases that repeat one object count each time)."""
    deepest, stack, seen = 0, [(data, 1)], 0
    while stack:
        item, level = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return -1
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # beyond it the answer is already "too deep"
            stack.extend((child, level + 1) for child in children)
    return deepest


class _Refused(Exception):
    """A well-formed file that holds something llmscale does not accept (a duplicate key, a tag)."""


_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')
"""A JSON string (skipped) or one of the non-standard constants Python's json module reads."""
_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:')


def _where_constant(text: str, name: str) -> str:
    """'key 'x' at line L column C' of the first `name` outside a string (the json module gives no position)."""
    for match in _CONSTANT.finditer(text):
        if match.group(1) == name:
            start = match.start(1)
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            keys = _KEY.findall(text, 0, start)  # the last key before it: the value's own, or its list's
            return (f"key {keys[-1]!r} " if keys else "") + f"at line {line} column {column}"
    return "somewhere"


def _parse_json(text: str) -> Any:
    def refuse_constant(name: str) -> Any:
        raise _Refused(f"{name} ({_where_constant(text, name)}) is not a JSON number (JSON has no NaN or Infinity); "
                       "give a finite value")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for key, value in pairs:
            if key in mapping:
                raise _Refused(f"key {key!r} is given twice in one object (JSON keeps the last one silently)")
            mapping[key] = value
        return mapping

    return json.loads(text, object_pairs_hook=unique, parse_constant=refuse_constant)


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # LibYAML composes without Python recursion


class _StrictLoader(_BaseLoader):
    """SafeLoader that refuses duplicate keys and non-standard tags, and reads timestamps as text."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node.tag not in _ALLOWED_TAGS and node.tag != _TAG + "timestamp":
            line = node.start_mark.line + 1
            raise _Refused(f"tag {node.tag.removeprefix(_TAG)!r} at line {line} is not accepted: llmscale reads "
                           "plain YAML (mappings, lists, strings, numbers, booleans, null)")
        return super().construct_object(node, deep=deep)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _TAG + "merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise _Refused(f"key {key!r} is given twice in one mapping (lines {seen[key]} and {line}); "
                                   "YAML would keep the last one silently")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))


_StrictLoader.add_constructor(_TAG + "timestamp", _StrictLoader.construct_yaml_timestamp)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_StrictLoader)
