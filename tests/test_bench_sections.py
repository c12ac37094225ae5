"""bench.run rewrites docs/benchmarks.md but keeps the sections other benchmarks wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.controller_bench import rows
from bench.run import sections, with_sections

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
GENERATED = "# Relay benchmark\n\nnew figures\n"


def test_the_document_marks_its_foreign_sections() -> None:
    found = sections(DOC.read_text())
    assert {"dns-rules", "relay-hardening", "controller-memory"} <= found.keys()


def test_a_rewrite_keeps_every_foreign_section_verbatim_and_in_order() -> None:
    previous = DOC.read_text()
    found = sections(previous)
    out = with_sections(GENERATED, previous)
    assert out.startswith(GENERATED.rstrip("\n"))
    where = [out.find(text) for text in found.values()]
    assert -1 not in where, "a foreign section was dropped or altered"
    assert where == sorted(where)
    # The old generated text is gone, and rewriting again changes nothing.
    assert "Raw runs:" not in out
    assert with_sections(GENERATED, out) == out


def test_a_section_the_report_writes_itself_is_not_doubled() -> None:
    previous = ("old\n\n<!-- BEGIN a -->\nold a\n<!-- END a -->\n\n"
                "<!-- BEGIN b -->\nb\n<!-- END b -->\n")
    generated = "new\n\n<!-- BEGIN a -->\nnew a\n<!-- END a -->\n"
    out = with_sections(generated, previous)
    assert out == generated + "\n<!-- BEGIN b -->\nb\n<!-- END b -->\n"


def test_an_unclosed_section_is_refused_rather_than_dropped() -> None:
    with pytest.raises(ValueError, match="'x'"):
        with_sections(GENERATED, "text\n<!-- BEGIN x -->\nmine\n")


def test_the_controller_report_keeps_its_sections_too() -> None:
    doc = DOC.with_name("benchmarks-controller.md")
    found = sections(doc.read_text())
    assert {"memory", "latency-profile"} <= found.keys()
    out = with_sections("# Controller benchmark\n", doc.read_text())
    assert all(text in out for text in found.values())


@pytest.mark.parametrize(("ingresses", "first_write", "rss"), [
    (10_000, "<= 1 s", "<= 60 MiB"), (50_000, "<= 3 s", "<= 100 MiB"), (2_000, "", "")])
def test_the_controller_table_gives_the_targets_of_its_size(ingresses: int, first_write: str,
                                                            rss: str) -> None:
    run = {"ingresses": ingresses, "events": 10, "steady_seconds": 2,
           "steady_no_lease_seconds": 1}
    targets = {measure: target for measure, _, target in rows(run)}
    assert targets[f"List of {ingresses:,} Ingresses to first Corefile write"] == first_write
    assert targets[f"Controller RSS with {ingresses:,} Ingresses cached (after the first "
                   "write)"] == rss
    assert targets["Event-to-write latency p99"] == "<= 20 ms"
