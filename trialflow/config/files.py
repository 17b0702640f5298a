"""Reading the files an experiment names (config, search space, templates) within bounds.

Why bounds: these files are read while Airflow parses the DAG file, which must
finish within its import timeout (30 s by default) and share the
dag-processor's memory. A 362-byte YAML alias bomb expands to billions of
values, a recursive anchor (``x: &x [*x]``) never ends, a deeply nested list
exhausts Python's stack, and a 50 MB file takes longer to validate than
Airflow waits. Each of these is refused here with the line it starts on,
before anything walks or validates the data.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

#: An NNI config is a page of YAML; 1 MiB leaves room for a large inline search space.
MAX_CONFIG_BYTES = 1024 * 1024
#: Search spaces can list long choices; 8 MiB still validates in a few seconds.
MAX_SEARCH_SPACE_BYTES = 8 * 1024 * 1024
#: Nesting of mappings and lists. NNI configs nest a handful of levels; nested choices a few more.
MAX_DEPTH = 64
#: Values after every alias is expanded (an alias counts each time it is used).
MAX_VALUES = 100_000


class RewrittenInt(int):
    """An integer YAML 1.1 read from a form it rewrites (``012345`` is octal 5349, ``0x1F``,
    ``1_000``, ``1:30`` is 90): a value that reads as text to a person. Numbers behave as ints;
    secrets refuse them (trialflow.config.base)."""


_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")


class _BoundedLoader(yaml.SafeLoader):
    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        return value if _PLAIN_INT.fullmatch(str(node.value).strip()) else RewrittenInt(value)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class FileProblem(ValueError):
    """What is wrong with a file's content, and the 1-based line where it shows (if known)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


def read_bounded(path: Path, limit: int, what: str) -> str:
    """The text of ``path``; a FileProblem for a folder, a device, a file over ``limit`` bytes,
    or bytes that are not UTF-8. Reads at most ``limit + 1`` bytes whatever the file claims."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileProblem(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise FileProblem(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise FileProblem(f"{what} {path} is a folder, expected a file")
    if not stat.S_ISREG(info.st_mode):
        raise FileProblem(f"{what} {path} is not a regular file (a device, pipe or socket)")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise FileProblem(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileProblem(
            f"{what} {path} is larger than {limit // 1024} KiB; that is not a config "
            "(Airflow must parse it within its DAG import timeout)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"cannot read {what} {path}: not UTF-8 text (byte {exc.start})") from None


def _line(event: yaml.Event) -> int | None:
    return event.start_mark.line + 1 if event.start_mark is not None else None


def _check_events(text: str) -> None:
    """Nesting depth and size from the event stream (iterative: safe at any depth)."""
    depth = count = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise FileProblem(f"nested deeper than {MAX_DEPTH} levels", _line(event))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            count += 1
            if count > MAX_VALUES:
                raise FileProblem(f"more than {MAX_VALUES} values", _line(event))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph that is recursive, or that aliases expand past MAX_VALUES values or
    MAX_DEPTH levels. Sizes are counted once per node (memoised), so a bomb costs no more to
    measure than its text."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            on_path.discard(key)
            if size[key] > MAX_VALUES:
                raise FileProblem(
                    f"aliases expand to more than {MAX_VALUES} values (an alias bomb?)", node.start_mark.line + 1
                )
            if depth[key] > MAX_DEPTH + 1:
                raise FileProblem(f"aliases nest deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
            continue
        if key in size:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise FileProblem(
                    "an alias refers to the value that contains it (a recursive structure)", child.start_mark.line + 1
                )
            if id(child) not in size:
                stack.append((child, False))


def check_duplicate_keys(root: yaml.Node) -> None:
    """Refuse a mapping that names a key twice, with both lines: YAML (and JSON) readers keep
    the last silently, so a config with two ``trialConcurrency`` lines ran with the second
    while its author read the first. Keys are compared as written (tag and text); merge keys
    (``<<``) are YAML's own way to repeat and are left to it."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                known = first.get((key.tag, key.value))
                if known is None:
                    first[(key.tag, key.value)] = line
                else:
                    raise FileProblem(
                        f"duplicate key {excerpt(key.value)}: on line {known} and line {line} "
                        "(only one may stay: a reader would keep the last without a word)",
                        line,
                    )
        stack.extend(_children(node))


def excerpt(text: str, keep: int = 40) -> str:
    """A value of the user's file as an error quotes it: at most ``keep`` characters."""
    return repr(text if len(text) <= keep else text[: keep - 1] + "…")


def load_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """(data, root node for line numbers) of one YAML document, refusing bombs, recursion and
    duplicate keys. A yaml.YAMLError for text that is not YAML."""
    _check_events(text)
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        check_expansion(node)
        check_duplicate_keys(node)
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def check_json_shape(data: Any) -> None:
    """Depth and size of parsed JSON (no aliases there, but nesting and size still count)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        value, level = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise FileProblem(f"more than {MAX_VALUES} values")
        if level > MAX_DEPTH:
            raise FileProblem(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)


class DuplicateJsonKey(ValueError):
    """A JSON object naming one key twice (``json.loads`` alone keeps the last, silently)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"the key {self.key[:80]!r} appears twice in one object"


def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object_pairs_hook that refuses a key named twice (DuplicateJsonKey)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateJsonKey(key)
        out[key] = value
    return out


def load_json(text: str) -> Any:
    """Parsed JSON within MAX_DEPTH / MAX_VALUES, refusing duplicate keys (with both lines);
    json.JSONDecodeError for text that is not JSON."""
    try:
        data = json.loads(text, object_pairs_hook=refuse_duplicates)
    except RecursionError:
        raise FileProblem(f"nested deeper than {MAX_DEPTH} levels") from None
    except DuplicateJsonKey as exc:
        # JSON's reader knows no lines: the same text composed as YAML (JSON is nearly a subset)
        # finds both; where it cannot, the key alone is named.
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            if node is not None:
                check_duplicate_keys(node)
        except FileProblem as located:
            raise located from None
        except yaml.YAMLError:
            pass
        raise FileProblem(f"duplicate key {excerpt(exc.key)} in one object") from None
    check_json_shape(data)
    return data
