"""Safe reading of a YAML config file: whatever the bytes, the result is either plain data with the
file line of every key and list item (so that validation errors can name `file:line`), or a
one-line `YamlConfigError`. Refused with one short line each: a directory or missing file, bytes
that are not UTF-8, duplicate keys (both lines named), nesting deeper than MAX_DEPTH, aliases that
expand past MAX_NODES values or into themselves (alias bombs), numbers Python cannot read, and
files larger than MAX_BYTES. Echoed user text is capped at MAX_ECHO characters."""
from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_BYTES = 1 << 20     # a config is a few KB; more is a wrong file, not a config
MAX_DEPTH = 100         # nested mappings and lists, counted through aliases
MAX_NODES = 100_000     # values once every alias is expanded (validation walks the expanded tree)
MAX_ECHO = 200          # characters of any user value quoted in a message

_MERGE = "tag:yaml.org,2002:merge"


class YamlConfigError(ValueError):
    """A config that cannot be read: the message is one line that names the file (and line)."""


def short(value: Any, limit: int = MAX_ECHO) -> str:
    """repr of a value for a message, never longer than `limit` (built without a full repr, so a
    huge or self-referencing value costs nothing)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = 10
    r.maxlevel = 3
    text = r.repr(value)
    return clip(text, limit)


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Located:
    """Loaded data and, for every mapping and list built from the file, the line of each key or item."""

    def __init__(self, data: Any, lines: dict[int, tuple[Any, dict]]):
        self.data = data
        self._lines = lines   # id(container) -> (container kept alive, {key or index: line})

    def line(self, loc: tuple) -> int | None:
        """The line of the value at path `loc` (keys and list indices, as pydantic's error loc),
        else of the deepest mapping or list on that path found in the file (a missing key: the
        line that opens its parent); None when not even the first step is in the file."""
        node, line = self.data, None
        for step in loc:
            entry = self._lines.get(id(node))
            if entry is None or entry[0] is not node:
                break
            children = entry[1]
            try:
                if step not in children:
                    break
            except TypeError:   # an unhashable step (never a key of the file)
                break
            line, node = children[step], node[step]
        return line


class _Loader(yaml.SafeLoader):
    """SafeLoader that records lines, refuses duplicate keys, and bounds depth and expansion."""

    def __init__(self, text: str, name: str):
        super().__init__(text)
        self.name = name
        self.depth = 0
        self.lines: dict[int, tuple[Any, dict]] = {}

    def refuse(self, mark, what: str) -> YamlConfigError:
        where = f"{self.name}:{mark.line + 1}" if mark is not None else self.name
        return YamlConfigError(f"config {where}: {what}")

    def fetch_flow_collection_start(self, TokenClass):
        # The scanner's cost per token grows with the flow depth (it reads ahead up to 1024
        # characters): `[[[[...` is refused as it is scanned, not only when composed.
        if self.flow_level >= MAX_DEPTH:
            raise self.refuse(self.get_mark(), f"nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent, index):
        # The composer recurses once per level: refused here, before Python's recursion limit.
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self.refuse(self.peek_event().start_mark, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (YamlConfigError, yaml.YAMLError):
            raise
        except (ValueError, OverflowError) as exc:   # e.g. an int of more digits than Python reads
            raise self.refuse(node.start_mark, f"cannot read the value {short(node.value, 60)}: "
                                               f"{clip(str(exc), 100)}") from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:   # `<<: *base` merges; its keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node)
                except TypeError:   # unhashable key: SafeConstructor says so
                    continue
                if seen is not key_node:
                    raise self.refuse(key_node.start_mark, f"duplicate key {short(key)} "
                                                           f"(first at line {seen.start_mark.line + 1})")
        return super().construct_mapping(node, deep)

    def construct_located_map(self, node):
        data: dict = {}
        yield data
        data.update(self.construct_mapping(node))
        # after flattening merges: later pairs win, as they do in the dict
        lines = {}
        for key_node, _ in node.value:
            try:
                lines[self.construct_object(key_node)] = key_node.start_mark.line + 1
            except TypeError:
                pass
        self.lines[id(data)] = (data, lines)

    def construct_located_seq(self, node):
        data: list = []
        yield data
        data.extend(self.construct_sequence(node))
        self.lines[id(data)] = (data, {i: item.start_mark.line + 1 for i, item in enumerate(node.value)})


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_located_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_located_seq)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: Node, loader: _Loader) -> None:
    """Refuse a document whose aliases expand past MAX_NODES values or MAX_DEPTH levels, or into
    themselves. Iterative and memoised per node, so a bomb is measured without expanding it."""
    size: dict[int, tuple[int, int]] = {}   # id(node) -> (values, depth) once expanded
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            open_nodes.discard(id(node))
            kids = [size[id(k)] for k in _children(node)]
            values, depth = 1 + sum(k[0] for k in kids), 1 + max((k[1] for k in kids), default=0)
            if values > MAX_NODES:
                raise loader.refuse(node.start_mark, f"aliases expand to more than {MAX_NODES} values "
                                                     "(an alias bomb?)")
            if depth > MAX_DEPTH:
                raise loader.refuse(node.start_mark, f"aliases nest deeper than {MAX_DEPTH} levels")
            size[id(node)] = (values, depth)
            continue
        if id(node) in size:
            continue
        if id(node) in open_nodes:
            raise loader.refuse(node.start_mark, "an alias refers to the value that contains it")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _syntax_error(exc: yaml.YAMLError, name: str, text: str) -> YamlConfigError:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        return YamlConfigError(f"config {name}:{line} is not valid YAML: unacceptable character "
                               f"U+{exc.character:04X} ({exc.reason})")
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        what = "; ".join(s for s in (exc.context, exc.problem) if s)
        return YamlConfigError(f"config {where} is not valid YAML: {clip(what)}")
    return YamlConfigError(f"config {name} is not valid YAML: {clip(str(exc))}")


def read_yaml(path: Path) -> Located:
    """The one YAML document of `path` with its lines; an empty document reads as None."""
    if path.is_dir():
        raise YamlConfigError(f"config {path} is a directory: give a YAML file (e.g. configs/default.yaml)")
    if not path.exists():
        raise YamlConfigError(f"config file {path} does not exist (try configs/default.yaml)")
    if not path.is_file():
        raise YamlConfigError(f"config {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlConfigError(f"config {path} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise YamlConfigError(f"config {path} is larger than {MAX_BYTES} bytes: not a config file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise YamlConfigError(f"config {path}:{line} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                              f"offset {exc.start}): save it as UTF-8") from None
    try:
        loader = _Loader(text, str(path))   # checks every character is printable
        node = loader.get_single_node()
        if node is None:
            return Located(None, {})
        _check_expansion(node, loader)
        return Located(loader.construct_document(node), loader.lines)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, str(path), text) from None


def read_layers(path: Path) -> list[tuple[Path, Located]]:
    """A config and the configs it extends (`extends: other.yaml`, relative to the file), base
    first: the settings of each layer replace or extend (mappings merge, key by key) the one below."""
    layers: list[tuple[Path, Located]] = []
    seen: set[Path] = set()
    while True:
        doc = read_yaml(path)
        if layers and not isinstance(doc.data, dict):
            raise YamlConfigError(f"config {path} is extended by {layers[0][0]}, so it must be a mapping of settings")
        layers.insert(0, (path, doc))
        seen.add(path.resolve())
        parent = doc.data.get("extends") if isinstance(doc.data, dict) else None
        if parent is None:
            return layers
        if not isinstance(parent, str) or not parent.strip():
            raise YamlConfigError(f"config {path}:{doc.line(('extends',))}: `extends` must name a YAML file")
        path = path.parent / parent
        if path.resolve() in seen:
            raise YamlConfigError(f"config {layers[0][0]} extends {path}, which extends it back")


def merge_layers(layers: list[tuple[Path, Located]]) -> Any:
    """The settings of `read_layers`' layers as one mapping (without their `extends`)."""
    if len(layers) == 1:
        return layers[0][1].data
    merged: dict = {}
    for _, doc in layers:
        merged = _merged(merged, {k: v for k, v in (doc.data or {}).items() if k != "extends"})
    return merged


def _merged(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merged(base[k], v) if k in base else v for k, v in over.items()}}
    return over


def layer_of(layers: list[tuple[Path, Located]], loc: tuple) -> tuple[Path, Located]:
    """The layer a setting comes from: the last that sets it (else the top one)."""
    for path, doc in reversed(layers):
        node = doc.data
        for step in loc:
            if isinstance(node, dict) and step in node or isinstance(node, list) and isinstance(step, int) and step < len(node):
                node = node[step]
            else:
                break
        else:
            return path, doc
    return layers[-1]
