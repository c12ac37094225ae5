"""Kubernetes objects from YAML/JSON files and directories, for the offline commands.

A path is a file, a directory (walked recursively in sorted order, ``.yaml``/``.yml``/
``.json`` files only, hidden entries skipped) or ``-`` for standard input. Multi-document
YAML, ``kind: List`` and the ``*List`` kinds are flattened. Only the safe YAML loader is used.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

SUFFIXES = (".yaml", ".yml", ".json")
INGRESS_GROUPS = frozenset({"networking.k8s.io", "extensions"})
STDIN = "-"


class ManifestError(ValueError):
    """A path could not be read or parsed; the message names the file and the object."""


@dataclass(frozen=True)
class Manifests:
    ingresses: tuple[dict[str, Any], ...]
    ingress_classes: tuple[dict[str, Any], ...]
    files: tuple[str, ...]  # every file read, in order
    # Every object read, in order (render's snapshot reads the other kinds).
    objects: tuple[dict[str, Any], ...] = ()


def manifest_files(path: Path) -> list[Path]:
    """``path`` itself if it is a file, else the manifest files under it in sorted order."""
    if not path.exists():
        raise ManifestError(f"{path}: no such file or directory")
    if not path.is_dir():
        return [path]
    found: list[Path] = []
    _walk(path, found)
    return found


def _walk(directory: Path, found: list[Path]) -> None:
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise ManifestError(f"{directory}: cannot list: {exc.strerror or exc}") from None
    for entry in entries:
        if entry.name.startswith("."):
            continue  # .git and editor droppings
        # Symlinked directories are not followed: a link back up would loop forever.
        if entry.is_dir() and not entry.is_symlink():
            _walk(entry, found)
        elif entry.suffix.lower() in SUFFIXES and entry.is_file():
            found.append(entry)


try:
    # libyaml's parser where PyYAML was built with it (the wheels are): the text read in C,
    # which is what takes the time at tens of thousands of objects.
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = f"{_TAG}str", f"{_TAG}map", f"{_TAG}seq"
# The scalar tags whose safe constructor makes a value of the node alone.
_SCALARS = frozenset(f"{_TAG}{name}" for name in
                     ("null", "bool", "int", "float", "timestamp", "binary"))


class _Other(Exception):
    """A document the direct build leaves to the safe constructor."""


class _Loader(_SafeLoader):
    """The safe loader, quicker on what manifests hold: the same documents, built in one
    recursive pass of plain dicts, lists and scalars rather than through the constructor's
    generators. A document with anything else (an alias, a merge key, a tag of another
    type) or that fails is built by the safe constructor itself, errors included."""

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # Without path resolvers (the safe loader has none) a scalar's tag depends on its
        # text alone: a quoted one, or a plain one whose first character starts no implicit
        # resolver (most names), is a string; the others are resolved as always.
        if (kind is ScalarNode and not self.yaml_path_resolvers
                and None not in self.yaml_implicit_resolvers
                and (not implicit[0] or (value and value[0] not in self.yaml_implicit_resolvers))):
            return str(self.DEFAULT_SCALAR_TAG)
        as_always: Any = super().resolve  # untyped in the stubs
        return str(as_always(kind, value, implicit))

    def construct_document(self, node: Node) -> Any:
        try:
            return self._build(node, set())
        except yaml.YAMLError:
            raise
        except Exception:  # the safe constructor decides, and words any error
            return super().construct_document(node)

    def _build(self, node: Node, seen: set[int]) -> Any:
        tag, cls = node.tag, type(node)
        if cls is ScalarNode:
            if tag == _STR:
                return node.value
            if tag in _SCALARS:
                return self._scalar(tag, node)
            raise _Other
        if id(node) in seen:
            raise _Other  # an alias: the safe constructor shares the object
        seen.add(id(node))
        if cls is MappingNode and tag == _MAP:
            out = {}
            for key, value in node.value:
                if type(key) is not ScalarNode:
                    raise _Other
                # Most keys and values are strings: taken here, without a call each.
                k = key.value if key.tag == _STR else self._build(key, seen)
                out[k] = value.value if type(value) is ScalarNode and value.tag == _STR \
                    else self._build(value, seen)
            return out
        if cls is SequenceNode and tag == _SEQ:
            return [self._build(item, seen) for item in node.value]
        raise _Other

    def _scalar(self, tag: str, node: Node) -> Any:
        # PyYAML's constructors fail on a value that is not what its tag says in their own
        # ways ("!!timestamp soon": an AttributeError): told here, where the node is known.
        try:
            return self.yaml_constructors[tag](self, node)
        except (ValueError, TypeError, AttributeError, OverflowError):
            raise ConstructorError(None, None, f"{node.value!r} is no {tag[len(_TAG):]}",
                                   node.start_mark) from None


_LOADER = _Loader


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for reading many objects (documents into dicts,
    lists and scalars; a cluster's listed objects), which leaves next to no cyclic garbage,
    yet at a million new containers the collector's passes over the growing heap took a
    quarter of the time. What there is is collected once it runs again."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _documents(text: str, where: str, as_json: bool) -> list[Any]:
    if as_json:
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{where}: invalid JSON at line {exc.lineno}, column "
                                f"{exc.colno}: {exc.msg}") from None
    try:
        with collector_paused():
            return list(yaml.load_all(text, Loader=_LOADER))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "parse error"
        raise ManifestError(f"{where}: invalid YAML{at}: {what}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{where}: invalid YAML: {exc}") from None
    except (ValueError, TypeError, AttributeError, OverflowError):
        # The safe constructor's own failures on such a value, in a document it builds.
        raise ManifestError(f"{where}: invalid YAML: a value is not what its tag says "
                            "(!!timestamp, !!int, !!float, ...)") from None


def _flatten(obj: Any, where: str) -> Iterator[dict[str, Any]]:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: not a Kubernetes object (a {type(obj).__name__})")
    kind = obj.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in obj:
        items = obj.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise ManifestError(f"{where} ({kind}): items is not a list")
        for i, item in enumerate(items):
            yield from _flatten(item, f"{where} items[{i}]")
        return
    yield obj


def load_text(text: str, where: str, *, as_json: bool = False) -> list[dict[str, Any]]:
    """Every object in one file's text, Lists flattened; ``where`` names it in errors."""
    objects: list[dict[str, Any]] = []
    for n, doc in enumerate(_documents(text, where, as_json), 1):
        if doc is None:
            continue  # an empty document, as between "---" separators
        objects.extend(_flatten(doc, f"{where}: document {n}"))
    return objects


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _group(obj: dict[str, Any]) -> str:
    api = obj.get("apiVersion")
    if not isinstance(api, str) or "/" not in api:
        return ""
    return api.split("/", 1)[0]


def load(paths: Iterable[str | Path], *, stdin: TextIO | None = None) -> Manifests:
    """The Ingresses and IngressClasses in ``paths``, and every object read."""
    ingresses: list[dict[str, Any]] = []
    classes: list[dict[str, Any]] = []
    files: list[str] = []
    objects: list[dict[str, Any]] = []
    sources: list[tuple[str, str, bool]] = []
    for raw in paths:
        if str(raw) == STDIN:
            stream = stdin if stdin is not None else sys.stdin
            try:
                sources.append(("<stdin>", stream.read(), False))
            except (OSError, UnicodeDecodeError) as exc:
                raise ManifestError(f"<stdin>: cannot read: {exc}") from None
            continue
        for path in manifest_files(Path(raw)):
            sources.append((str(path), _read(path), path.suffix.lower() == ".json"))
    for where, text, as_json in sources:
        files.append(where)
        for obj in load_text(text, where, as_json=as_json):
            objects.append(obj)
            kind, group = obj.get("kind"), _group(obj)
            if kind == "Ingress" and group in INGRESS_GROUPS:
                ingresses.append(obj)
            elif kind == "IngressClass" and group == "networking.k8s.io":
                classes.append(obj)
    return Manifests(tuple(ingresses), tuple(classes), tuple(files), tuple(objects))
