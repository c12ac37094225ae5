"""Loading Kubernetes objects from files, directories and standard input."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy import manifests
from hairpin_proxy.manifests import ManifestError, load, load_text, manifest_files

FIXTURES = Path(__file__).parent / "manifests"
CLUSTER = FIXTURES / "cluster"

INGRESS = """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: %s, namespace: ns}
spec: {tls: [{hosts: [%s.example.com]}]}
"""


def names(objs: tuple[dict[str, object], ...]) -> list[object]:
    return [o["metadata"]["name"] for o in objs]  # type: ignore[index]


def test_fixture_directory_is_walked_in_sorted_order() -> None:
    files = manifest_files(CLUSTER)
    assert [f.relative_to(CLUSTER).as_posix() for f in files] == [
        "apps/api.yml", "apps/list.json", "ingresses.yaml"]  # no README.md, no .ignored.yaml
    m = load([CLUSTER])
    assert names(m.ingresses) == ["api", "grafana", "web", "blog", "sneaky"]
    assert names(m.ingress_classes) == ["nginx", "traefik"]
    assert m.files == tuple(str(f) for f in files)


def test_an_explicit_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    path = tmp_path / "ingress.txt"
    path.write_text(INGRESS % ("a", "a"))
    assert names(load([path]).ingresses) == ["a"]


def test_multi_document_yaml_lists_and_empty_documents(tmp_path: Path) -> None:
    (tmp_path / "all.yaml").write_text(
        "---\n" + INGRESS % ("a", "a") + "---\n---\n# only a comment\n---\n"
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: networking.k8s.io/v1\n  kind: IngressList\n  items:\n"
        "  - {apiVersion: networking.k8s.io/v1, kind: Ingress, metadata: {name: b}}\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n"
        "---\napiVersion: v1\nkind: List\nitems: null\n")
    assert names(load([tmp_path]).ingresses) == ["a", "b"]


def test_only_ingress_groups_count(tmp_path: Path) -> None:
    objs = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "v1"}},
        {"apiVersion": "networking.k8s.io/v1beta1", "kind": "Ingress",
         "metadata": {"name": "beta"}},
        {"apiVersion": "extensions/v1beta1", "kind": "Ingress", "metadata": {"name": "ext"}},
        {"apiVersion": "example.com/v1", "kind": "Ingress", "metadata": {"name": "crd"}},
        {"apiVersion": "v1", "kind": "Ingress", "metadata": {"name": "core"}},
        {"kind": "Ingress", "metadata": {"name": "noapi"}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
         "metadata": {"name": "cls"}},
    ]
    (tmp_path / "objs.json").write_text(json.dumps({"kind": "List", "items": objs}))
    m = load([tmp_path])
    assert names(m.ingresses) == ["v1", "beta", "ext"]
    assert names(m.ingress_classes) == ["cls"]


def test_standard_input(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(INGRESS % ("b", "b"))
    m = load(["-", tmp_path], stdin=io.StringIO(INGRESS % ("a", "a")))
    assert names(m.ingresses) == ["a", "b"]
    assert m.files[0] == "<stdin>"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + (INGRESS % ("a", "a")).encode())
    assert names(load([tmp_path]).ingresses) == ["a"]


def test_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(INGRESS % ("a", "a"))
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "a.yaml")
    assert names(load([tmp_path]).ingresses) == ["a", "a"]


@pytest.mark.parametrize(("content", "message"), [
    ("a: [unclosed\n",
     r"bad\.yaml: invalid YAML at line 2, column 1: did not find expected ',' or ']'"),
    ("a: 1\n  b: 2\n", r"bad\.yaml: invalid YAML at line 2, column 4"),
    ("!!python/object/apply:os.system [\"true\"]\n",
     r"bad\.yaml: invalid YAML at line 1, column 1: could not determine a constructor"),
    # A value that is not what its tag says: in our words, at its place, never a traceback.
    ("metadata:\n  creationTimestamp: !!timestamp soon\n",
     r"bad\.yaml: invalid YAML at line 2, column 22: 'soon' is no timestamp"),
    ("a: !!timestamp 2024-13-45\n", r"bad\.yaml: invalid YAML at line 1, column 4: "
     r"'2024-13-45' is no timestamp"),
    ("a: !!int twelve\n", r"line 1, column 4: 'twelve' is no int"),
    ("a: !!float x\n", r"line 1, column 4: 'x' is no float"),
    # An alias: built by the safe constructor, which fails the same way.
    ("a: &x {k: 1}\nb: *x\nc: !!timestamp soon\n",
     r"bad\.yaml: invalid YAML: a value is not what its tag says"),
    ("- 1\n- 2\n", r"bad\.yaml: document 1: not a Kubernetes object \(a list\)"),
    ("just text\n", r"bad\.yaml: document 1: not a Kubernetes object \(a str\)"),
    (INGRESS % ("a", "a") + "---\nkind: List\nitems: {a: 1}\n",
     r"bad\.yaml: document 2 \(List\): items is not a list"),
    ("kind: List\nitems: [{kind: Ingress}, 7]\n",
     r"bad\.yaml: document 1 items\[1\]: not a Kubernetes object \(a int\)"),
])
def test_bad_yaml_names_the_file_and_the_object(tmp_path: Path, content: str,
                                                message: str) -> None:
    (tmp_path / "bad.yaml").write_text(content)
    with pytest.raises(ManifestError, match=message):
        load([tmp_path])


def test_unsafe_tags_never_execute(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "evil.yaml").write_text(
        f"!!python/object/apply:os.system [\"touch {marker}\"]\n")
    with pytest.raises(ManifestError):
        load([tmp_path])
    assert not marker.exists()


def test_bad_json(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"kind": "List",\n "items": [}\n')
    with pytest.raises(ManifestError, match=r"x\.json: invalid JSON at line 2, column 12"):
        load([tmp_path])


def test_missing_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"nope\.yaml: no such file or directory"):
        load([tmp_path / "nope.yaml"])
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(ManifestError, match=r"bin\.yaml: not UTF-8 text \(byte 6\)"):
        load([binary])
    if os.geteuid() != 0:  # root reads everything
        locked = tmp_path / "locked.yaml"
        locked.write_text(INGRESS % ("a", "a"))
        locked.chmod(0)
        with pytest.raises(ManifestError, match=r"locked\.yaml: cannot read"):
            load([locked])


def test_load_text_reports_its_own_name() -> None:
    with pytest.raises(ManifestError, match=r"^inline: document 1"):
        load_text("[1]", "inline")
    assert load_text("", "inline") == []


def test_yaml_is_read_by_libyaml_where_present_and_reads_the_same() -> None:
    # PyYAML's wheels carry libyaml: the C parser reads 50,000 objects five times faster.
    assert yaml.__with_libyaml__
    assert issubclass(manifests._LOADER, yaml.CSafeLoader)
    text = "a: 1\nb: [x, 2025-01-01]\n---\nkind: List\nitems: []\n"
    assert list(yaml.load_all(text, Loader=manifests._LOADER)) == list(yaml.safe_load_all(text))


# What the direct build handles and what it leaves to the safe constructor: each must read
# exactly as the safe loader reads it (values, types, shared objects) or fail as it fails.
SAFE_CASES = [
    "a: 1\nb: [x, '2', \"3\", 4.5, .inf, -.nan, 0x1f, 0o17, 1_000, 1:20]\n",
    "t: [true, True, TRUE, false, yes, no, on, off, y, n, ~, null, Null, '']\n",
    "when: 2025-01-01T10:00:00Z\nday: 2025-01-01\nbin: !!binary aGVsbG8=\n",
    "quoted: ['1', \"true\", 'null', '2025-01-01']\nplain: [.5, +1, -2, 1e3, 0.]\n",
    "shared: &x {a: [1, 2]}\nagain: *x\nlist: &l [1]\nmore: [*l, *l]\n",
    "base: &b {x: 1, y: 2}\nderived: {<<: *b, y: 3}\n",
    "merged: {<<: [{a: 1}, {b: 2}], c: 3}\n",
    "? [a, b]\n: unhashable\n",
    "? {a: 1}\n: unhashable\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\np: !!pairs [{a: 1}, {a: 2}]\n",
    "= : value key\nk: {=: v}\n",
    "tagged: !!str 12\nint: !!int '7'\nfloat: !!float '1'\nnull: !!null ''\n",
    "custom: !thing {a: 1}\n",
    "bad: !!timestamp not-a-date\n",
    "bad: !!binary '@@@'\n",
    "bad: !!int x\n",
    "dup: 1\ndup: 2\n1: int key\n1.5: float\ntrue: bool\n~: none\n2025-01-01: day\n",
    "! tagged plain\n",
    "--- 1\n--- [a]\n---\n--- {a: !!seq [1]}\n...\n",
    "\ufeffkind: Ingress\nname: é ü 中\n",
    "deep: " + "[" * 40 + "x" + "]" * 40 + "\n",
    "a: |\n  literal\n  text\nb: >\n  folded\n  text\n",
]


def _read_all(text: str, loader: type[Any]) -> tuple[str, list[object]]:
    try:
        return "ok", list(yaml.load_all(text, Loader=loader))
    except Exception as exc:  # PyYAML lets a few of its own bugs out (!!timestamp x)
        return "error", [type(exc).__name__, str(exc)]


# What PyYAML's safe constructor lets out on a value its tag does not fit.
NOT_YAML_ERRORS = {"ValueError", "TypeError", "AttributeError", "OverflowError"}


def _reads_as_safe(quick: tuple[str, list[object]], expected: tuple[str, list[object]]) -> bool:
    """Read as the safe loader reads (values, types, shared objects), or fail where it fails:
    its own failures on a mistyped value told as a YAML error, the others the same."""
    if expected[0] == "error" and expected[1][0] in NOT_YAML_ERRORS:
        return quick[0] == "error" and quick[1][0] == "ConstructorError"
    return repr(quick) == repr(expected) and quick == expected


@pytest.mark.parametrize("text", SAFE_CASES)
def test_the_quick_loader_reads_as_the_safe_loader(text: str) -> None:
    quick = _read_all(text, manifests._LOADER)
    expected = _read_all(text, yaml.CSafeLoader)
    assert _reads_as_safe(quick, expected), (quick, expected)
    # The pure-Python loader reads the same (its errors quote the text: worded otherwise).
    pure = _read_all(text, yaml.SafeLoader)
    assert pure[0] == quick[0]
    if pure[0] == "ok":
        assert repr(pure) == repr(quick)


def test_the_quick_loader_keeps_shared_objects_shared() -> None:
    (doc,) = yaml.load_all("a: &x {k: [1]}\nb: *x\n", Loader=manifests._LOADER)
    assert doc["a"] is doc["b"]


def test_the_quick_loader_reads_the_fixtures_as_the_safe_loader() -> None:
    for path in manifest_files(FIXTURES):
        text = path.read_text(encoding="utf-8-sig")
        assert _reads_as_safe(_read_all(text, manifests._LOADER),
                              _read_all(text, yaml.CSafeLoader)), path
