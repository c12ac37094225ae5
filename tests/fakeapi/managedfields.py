"""metadata.managedFields as the API server keeps them (field manager, structured-merge-diff).

What the real server does, from its source (k8s.io/apiserver handlers/fieldmanager and
sigs.k8s.io/structured-merge-diff merge/update.go):

- The manager is the request's ``fieldManager``, else the User-Agent up to its first ``/``
  with unprintable characters dropped and cut at 128 bytes (``managerOrUserAgent``,
  ``prefixFromUserAgent``). Apply requires ``fieldManager``.
- Entries are kept per manager identifier: manager, operation and, for Update, apiVersion
  (``BuildManagerIdentifier``; plus the subresource). Each is ``{manager, operation,
  apiVersion, time, fieldsType: FieldsV1, fieldsV1}`` (``subresource`` when there is one),
  listed Apply before Update, then by time, manager, apiVersion (``sortEncodedManagedFields``).
- An Update (create, update, every patch but apply) compares the live and the new object:
  the fields it added or changed become the manager's and are taken from every other
  manager (updates always force); removed fields leave every set; an empty set drops its
  entry. The entry's time moves only when its field set changes (``managedFieldsUpdater``).
- An Apply sets the manager's fields to the leaves of the applied configuration; fields it
  changes that another manager owns are a 409 conflict unless ``force=true``.
- Not tracked: apiVersion, kind, metadata itself and metadata name, namespace, uid,
  resourceVersion, generation, creationTimestamp, selfLink, managedFields (``stripmeta.go``);
  status on main-resource writes of kinds with a status subresource (reset fields), and
  anything but status on ``/status`` writes.
- A request whose body carries non-empty managedFields starts from them (a read-modify-write
  client sends the live ones back unchanged); ``[{}]`` resets them.

Simplified: lists are atomic leaves (the real server tracks the items of associative lists
by key, ``k:{...}``; the ConfigMaps and the other objects tests arrange owner checks on have
none); no cap of ten Update managers (``capManagers`` folds the oldest into
``ancient-changes``); no conversion of sets between versions; no managedFields validation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]
FieldSet = frozenset[Path]

MAX_MANAGER_BYTES = 128
_STRIPPED: FieldSet = frozenset({
    ("apiVersion",), ("kind",), ("metadata",), ("metadata", "name"),
    ("metadata", "namespace"), ("metadata", "creationTimestamp"), ("metadata", "selfLink"),
    ("metadata", "uid"), ("metadata", "clusterName"), ("metadata", "generation"),
    ("metadata", "managedFields"), ("metadata", "resourceVersion"),
    # Set by the server's own deletion handling, never by a client's write.
    ("metadata", "deletionTimestamp"), ("metadata", "deletionGracePeriodSeconds"),
})


@dataclass(frozen=True)
class Writer:
    """Whose write it is: the field manager and its operation (an Apply carries its applied
    configuration and whether it forces conflicts)."""

    manager: str
    operation: str = "Update"
    force: bool = True
    applied: Obj | None = None


class ApplyConflict(Exception):
    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(message(conflicts))


def message(conflicts: list[tuple[str, Path]]) -> str:
    n = len(conflicts)
    head = f"Apply failed with {n} conflict{'s' if n != 1 else ''}: "
    parts = [f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts]
    return head + "; ".join(parts) if n > 1 else head + parts[0]


def manager_from_user_agent(user_agent: str) -> str:
    """``prefixFromUserAgent``: the part before the first '/', printable characters only, at
    most 128 bytes of UTF-8."""
    out: list[str] = []
    size = 0
    for ch in user_agent.split("/", maxsplit=1)[0]:
        # str.isprintable is Go's unicode.IsPrint: no Other or Separator, but the ASCII space.
        if not ch.isprintable():
            continue
        n = len(ch.encode())
        if size + n > MAX_MANAGER_BYTES:
            break
        out.append(ch)
        size += n
    return "".join(out)


# ------------------------------------------------------------------ sets and values


def _walk(value: Any, prefix: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            path = (*prefix, str(k))
            out[path] = v if not isinstance(v, dict) else _MAP
            _walk(v, path, out)


class _MapMarker:
    def __repr__(self) -> str:
        return "<map>"


_MAP = _MapMarker()


def _leaves(obj: Obj | None, has_status: bool, subresource: str | None) -> dict[Path, Any]:
    """Every tracked path → its value (maps as a marker: a map is never 'modified')."""
    out: dict[Path, Any] = {}
    _walk(obj or {}, (), out)

    def tracked(p: Path) -> bool:
        if p in _STRIPPED:
            return False
        if subresource == "status":
            return p[0] == "status"
        return not (has_status and p[0] == "status")
    return {p: v for p, v in out.items() if tracked(p)}


def _compare(old: dict[Path, Any], new: dict[Path, Any]) -> tuple[FieldSet, FieldSet, FieldSet]:
    """(added, modified, removed)."""
    added = frozenset(p for p in new if p not in old)
    removed = frozenset(p for p in old if p not in new)
    modified = frozenset(p for p in new if p in old and new[p] is not _MAP
                         and (old[p] is _MAP or old[p] != new[p]))
    return added, modified, removed


def encode(fields: Iterable[Path]) -> Obj:
    """A field set as FieldsV1: ``f:<name>`` per map key, ``.`` for a member with children."""
    root: Obj = {}
    members = set(fields)
    for path in sorted(members):
        node = root
        for i, name in enumerate(path):
            node = node.setdefault(f"f:{name}", {})
            if path[:i + 1] in members and i + 1 < len(path):
                node["."] = {}
    for path in members:
        node = root
        for name in path:
            node = node[f"f:{name}"]
        if node and "." not in node:
            node["."] = {}
    return root


def decode(fields: Any, prefix: Path = ()) -> FieldSet:
    out: set[Path] = set()
    if not isinstance(fields, dict):
        return frozenset()
    for key, child in fields.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        name = key[2:] if key.startswith("f:") else key
        path = (*prefix, name)
        if isinstance(child, dict) and child:
            out |= decode(child, path)
        else:
            out.add(path)
    return frozenset(out)


# ------------------------------------------------------------------ entries


def _ident(e: Obj) -> tuple[str, str, str, str]:
    op = str(e.get("operation") or "")
    return (str(e.get("manager") or ""), op,
            "" if op == "Apply" else str(e.get("apiVersion") or ""),
            str(e.get("subresource") or ""))


def _sorted(entries: list[Obj]) -> list[Obj]:
    return sorted(entries, key=lambda e: (e["operation"], e.get("time") or "", e["manager"],
                                          e.get("apiVersion") or "", e.get("subresource", "")))


def starting_point(live: Obj | None, body: Obj) -> list[Obj]:
    """The managedFields the request starts from: its own when it carries some, else the
    live object's; ``[{}]`` resets them."""
    given = (body.get("metadata") or {}).get("managedFields")
    if isinstance(given, list) and given:
        if given == [{}]:
            return []
        return [e for e in given if isinstance(e, dict) and e.get("manager")]
    return list(((live or {}).get("metadata") or {}).get("managedFields") or [])


def record(live: Obj | None, new: Obj, *, manager: str, operation: str, api_version: str,
           has_status: bool, subresource: str | None, now: str, force: bool = True,
           applied: Obj | None = None) -> list[Obj]:
    """The managedFields ``new`` gets when ``manager`` writes it over ``live`` (None:
    created). ``applied`` is the applied configuration of an Apply; ApplyConflict when it
    changes another manager's fields without ``force``."""
    entries = starting_point(live, new)
    old_leaves = _leaves(live, has_status, subresource)
    new_leaves = _leaves(new, has_status, subresource)
    added, modified, removed = _compare(old_leaves, new_leaves)
    me: Obj = {"manager": manager, "operation": operation, "apiVersion": api_version}
    if subresource:
        me["subresource"] = subresource
    mine = _ident(me)
    changed = added | modified
    sets = {_ident(e): decode(e.get("fieldsV1")) for e in entries}
    by_ident = {_ident(e): e for e in entries}
    if operation == "Apply":
        # The applied configuration's set holds its leaves only (ToFieldSet inserts scalars
        # and atomic values, not the maps around them).
        want = frozenset(p for p, v in _leaves(applied, has_status, subresource).items()
                         if v is not _MAP)
        conflicts = sorted((i[0], p) for i, s in sets.items() if i != mine
                           for p in s & changed)
        if conflicts and not force:
            raise ApplyConflict(conflicts)
        own = want & frozenset(new_leaves)
    else:
        own = changed
    out: list[Obj] = []
    for ident, fields in sets.items():
        if ident == mine:
            continue
        left = fields - changed - removed
        if left:
            e = dict(by_ident[ident])
            e["fieldsV1"] = encode(left)
            out.append(e)
    former = sets.get(mine)
    result = own if operation == "Apply" else own | ((former or frozenset()) - removed)
    if result:
        e = dict(by_ident.get(mine) or {})
        e.update(me)
        e["fieldsType"] = "FieldsV1"
        e["fieldsV1"] = encode(result)
        # An Update moves the time only when it took fields and the set changed; an Apply
        # whenever it changed the object or the sets.
        moved = (bool(changed) and former != result) if operation != "Apply" else (
            bool(changed or removed) or former != result)
        if moved or not e.get("time"):
            e["time"] = now
        out.append(e)
    return _sorted(out)


def owners(obj: Obj, path: Path) -> list[str]:
    """The managers whose set holds ``path`` (tests' helper)."""
    return [str(e.get("manager")) for e in (obj.get("metadata") or {}).get("managedFields") or []
            if path in decode(e.get("fieldsV1"))]
