"""Reading price-sheet files safely, and finding the line a field is on.

A price sheet is a small hand-written file (the bundled ones are a few KB), so anything large
or deeply nested is refused before it can cost minutes or memory: at most `MAX_SHEET_BYTES`,
nesting at most `MAX_DEPTH` deep, and a YAML file whose aliases would expand past
`MAX_YAML_NODES` nodes is refused without expanding it (the "billion laughs" file: a few lines
whose anchors and aliases expand to a billion strings). YAML is read with PyYAML's safe loader
only (no Python objects).

`field_line` maps a validation error's field path, such as ('offers', 2, 'prices', 0,
'amount'), to the line it is on, so a message can say "line 14": exactly for YAML and JSON
(from the parser's own node marks), by a scan of table headers and keys for TOML.
"""

from __future__ import annotations

import json
import re
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

# 64 KiB would hold every bundled sheet ten times over; 1 MiB leaves room for a big user sheet.
MAX_SHEET_BYTES = 1 << 20
# The sheet format is 4 levels deep (offers[].prices[].amount); 32 is generous.
MAX_DEPTH = 32
MAX_YAML_NODES = 100_000


class SheetReadError(ValueError):
    """The file cannot be read as a sheet; `line` is where, when known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def read_text(path: Path) -> str:
    """The file's text, refusing anything larger than a sheet can be (read no further than that)."""
    with path.open("rb") as fp:
        raw = fp.read(MAX_SHEET_BYTES + 1)
    if len(raw) > MAX_SHEET_BYTES:
        raise SheetReadError(f"larger than {MAX_SHEET_BYTES // 1024} KiB, far more than a price sheet holds")
    return raw.decode("utf-8")


def parse_text(text: str, suffix: str) -> Any:
    """The parsed document (Decimal for every non-integer number); SheetReadError on bad syntax."""
    try:
        if suffix == ".toml":
            data = tomllib.loads(text, parse_float=Decimal)
        elif suffix in (".yaml", ".yml"):
            data = _decimals(_safe_yaml(text))
        else:
            data = json.loads(text, parse_float=Decimal)
    except RecursionError:
        raise SheetReadError(f"nested more than {MAX_DEPTH} levels deep; a price sheet is 4 levels deep") from None
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise SheetReadError(f"not valid TOML ({exc}); fix the syntax", int(line.group(1)) if line else None) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)
        raise SheetReadError(f"not valid YAML{f' ({problem})' if problem else ''}; fix the syntax",
                             mark.line + 1 if mark else None) from None
    except json.JSONDecodeError as exc:
        raise SheetReadError(f"not valid JSON ({exc.msg} at line {exc.lineno}); fix the syntax", exc.lineno) from None
    if _depth(data) > MAX_DEPTH:
        raise SheetReadError(f"nested more than {MAX_DEPTH} levels deep; a price sheet is 4 levels deep")
    return data


def _safe_yaml(text: str) -> Any:
    """yaml.safe_load, after checking the nesting depth (from the parser's flat event stream,
    before PyYAML's recursive composer sees it) and what the aliases would expand to."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise SheetReadError(f"nested more than {MAX_DEPTH} levels deep; a price sheet is 4 levels deep")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise SheetReadError(
                f"would expand to more than {MAX_YAML_NODES:,} values through its YAML aliases "
                "(&anchor / *alias); a price sheet is a few hundred"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int = 0) -> int:
    """Values `node` stands for once every alias is expanded; aliases share node objects, so
    each distinct node is counted once and reused (linear in the file, however it expands)."""
    if depth > MAX_DEPTH:
        raise SheetReadError(f"nested more than {MAX_DEPTH} levels deep; a price sheet is 4 levels deep")
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = MAX_YAML_NODES + 1  # a node that contains itself expands for ever
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo, depth + 1) for v in node.value)
    else:
        size = 1
    memo[key] = min(size, MAX_YAML_NODES + 1)
    return memo[key]


def _depth(data: Any) -> int:
    """Nesting depth of parsed data, without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return deepest


def _decimals(value: Any) -> Any:
    """YAML gives floats; turn them into Decimal through their shortest repr (0.1 stays 0.1)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_decimals(v) for v in value]
    if isinstance(value, dict):
        return {k: _decimals(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# Where a field is


def field_line(text: str, suffix: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the field at `loc` (or of its nearest enclosing part); None if unknown."""
    try:
        if suffix == ".toml":
            return _toml_line(text, loc)
        return _node_line(text, loc)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None


def _node_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """YAML, and JSON (a YAML flow document for this purpose): walk the composed nodes."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            child = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if child is not None:
                key_node = next(k for k, v in node.value if v is child)
                line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


_HEADER = re.compile(r"^\s*(\[\[|\[)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')\s*=")


def _toml_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Scan table headers ([billing], [[offers]], [[offers.prices]]) and `key =` lines, giving
    each line its field path with array indices, and return the line whose path shares the
    longest prefix with `loc`."""
    array_index: dict[tuple[str, ...], int] = {}
    current: tuple[Any, ...] = ()
    best_len, best_line = 0, None

    def indexed(names: tuple[str, ...]) -> tuple[Any, ...]:
        path: list[Any] = []
        for i in range(1, len(names) + 1):
            path.append(names[i - 1])
            if names[:i] in array_index:
                path.append(array_index[names[:i]])
        return tuple(path)

    def consider(path: tuple[Any, ...], line: int) -> None:
        nonlocal best_len, best_line
        common = 0
        for a, b in zip(path, loc):
            if a != b:
                break
            common += 1
        if common > best_len:
            best_len, best_line = common, line

    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            names = tuple(part.strip().strip("\"'") for part in header.group(2).split("."))
            if header.group(1) == "[[":
                array_index[names] = array_index.get(names, -1) + 1
                for deeper in [k for k in array_index if len(k) > len(names) and k[:len(names)] == names]:
                    del array_index[deeper]  # a new [[offers]] starts its own [[offers.prices]]
            current = indexed(names)
            consider(current, number)
            continue
        key = _KEY.match(line)
        if key:
            consider((*current, key.group(1).strip("\"'")), number)
    return best_line
