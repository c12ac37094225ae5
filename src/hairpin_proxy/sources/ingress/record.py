"""A cached Ingress as one small read-only record that reads as the trimmed object.

``slim.slim_ingress`` keeps well-formed Ingresses in this form: the fields the controller
reads (five of ``metadata``, the class annotation, ``spec`` and ``status``) in the slots of one
object, where the trimmed dicts took two dicts. At 10,000 Ingresses that is over a megabyte.
Read as a mapping it is the trimmed object: ``record["metadata"]`` is a view of the same
record that reads as the trimmed ``metadata``; ``apiVersion`` and ``kind`` are kept as which
class the record is (the Ingress API has one version), not per object. ``get``, ``[]``, ``in``,
iteration, ``keys``/``items``/``values``, ``dict()``, ``**`` and equality give what the dict form
gives; the record cannot be edited, which the caches rely on anyway (a change replaces the
object). Neither class derives from ``Mapping`` (they are registered as mappings): a class of
ABCMeta makes every ``isinstance`` test against it, positive or not, go through the ABC
machinery, and the policy tests each Ingress and its metadata several times.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Final

from hairpin_proxy.apis import INGRESS_API_VERSION

API_VERSION: Final = INGRESS_API_VERSION
KIND: Final = "Ingress"

# A key the object does not have.
ABSENT: Final[Any] = object()

# The kept ``metadata`` fields, in the order the trimmed dict has them.
META_KEYS: Final = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                    "annotations")
_META_SET: Final = frozenset(META_KEYS)
_HEAD_VALUES: Final = {"apiVersion": API_VERSION, "kind": KIND}


class _ReadOnlyMapping:
    """What ``Mapping`` would add, for the two classes below."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, ABSENT)
        if value is ABSENT:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, key: object) -> bool:
        return type(key) is str and self.get(key, ABSENT) is not ABSENT

    def keys(self) -> KeysView[str]:
        return KeysView(self)

    def items(self) -> ItemsView[str, Any]:
        return ItemsView(self)

    def values(self) -> ValuesView[Any]:
        return ValuesView(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class IngressRecord(_ReadOnlyMapping):
    """A cached Ingress without ``apiVersion`` and ``kind`` (as list items come); slots named
    as the keys they hold, ``ABSENT`` where the object has none. ``annotations`` holds the
    trimmed annotations (only the class annotation), ``spec`` what slim keeps of it."""

    __slots__ = ("annotations", "creationTimestamp", "name", "namespace", "resourceVersion",
                 "spec", "status", "uid")

    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    annotations: Any
    spec: Any
    status: Any

    # The keys before "metadata" (see WithHead).
    _HEAD: tuple[str, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        # Every reader calls get: no KeyError raised and caught for an absent key.
        if key == "metadata":
            return MetaView(self)
        if key == "spec":
            value = self.spec
        elif key == "status":
            value = self.status
        elif key in self._HEAD:
            return _HEAD_VALUES[key]
        else:
            return default
        return default if value is ABSENT else value

    def __iter__(self) -> Iterator[str]:
        yield from self._HEAD
        yield "metadata"
        if self.spec is not ABSENT:
            yield "spec"
        if self.status is not ABSENT:
            yield "status"

    def __len__(self) -> int:
        return len(self._HEAD) + 1 + (self.spec is not ABSENT) + (self.status is not ABSENT)

    def __bool__(self) -> bool:
        # It has "metadata"; readers test it (``obj or {}``) more than they count it.
        return True

    def fields(self) -> tuple[Any, ...]:
        return (self.name, self.namespace, self.uid, self.resourceVersion,
                self.creationTimestamp, self.annotations, self.spec, self.status)

    def __eq__(self, other: object) -> bool:
        # A relist compares every cached Ingress with its fresh copy: slot by slot (the spec
        # compares as fast), not through the dicts a mapping's comparison would build.
        if type(other) is type(self):
            return self.fields() == other.fields()
        return super().__eq__(other)

    __hash__ = None


class WithHead(IngressRecord):
    """A cached Ingress that came with ``apiVersion: networking.k8s.io/v1`` and
    ``kind: Ingress`` (as watch events bring it): the same record, which reads them too."""

    __slots__ = ()

    _HEAD = ("apiVersion", "kind")


# The record classes, for a reader's fast path: ``type(x) in RECORDS`` is an exact test.
RECORDS: Final[frozenset[type]] = frozenset({IngressRecord, WithHead})


class MetaView(_ReadOnlyMapping):
    """``metadata`` of an IngressRecord, read from the record (made on each read: a view is
    cheaper to make than to keep for every Ingress)."""

    __slots__ = ("_of",)

    def __init__(self, of: IngressRecord) -> None:
        self._of = of

    def get(self, key: str, default: Any = None) -> Any:
        if key in _META_SET:
            value = getattr(self._of, key)
            return default if value is ABSENT else value
        return default

    def __iter__(self) -> Iterator[str]:
        of = self._of
        for key in META_KEYS:
            if getattr(of, key) is not ABSENT:
                yield key

    def __len__(self) -> int:
        of = self._of
        return sum(getattr(of, key) is not ABSENT for key in META_KEYS)

    def __bool__(self) -> bool:
        # ``obj.get("metadata") or {}`` is how readers take it: the name decides at once.
        return self._of.name is not ABSENT or len(self) > 0

    def __eq__(self, other: object) -> bool:
        if type(other) is MetaView:
            return self._of.fields()[:6] == other._of.fields()[:6]
        return super().__eq__(other)

    __hash__ = None


class _Registered(Mapping[str, Any], metaclass=ABCMeta):
    """Where the two classes are registered as mappings. Registered with ``Mapping`` itself,
    every ``isinstance(x, Mapping)`` on them would take the ABC's slow path (its registry is
    never cached); registered with a subclass of it, the first such test caches them as
    mappings, and later ones cost what they cost for a dict."""


_Registered.register(IngressRecord)
_Registered.register(MetaView)
