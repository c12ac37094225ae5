from __future__ import annotations

import pytest

from hairpin_proxy.metrics import Registry


def test_exposition_format() -> None:
    r = Registry()
    c = r.counter("conn_total", "Connections.", ["listener"])
    c.labels("a").inc()
    c.labels("a").inc(2)
    c.labels('b"x').inc()
    g = r.gauge("active", "Active.")
    g.inc(5)
    g.dec(2)
    h = r.histogram("lat_seconds", "Latency.", buckets=(0.1, 1.0))
    for v in (0.05, 0.5, 5.0):
        h.observe(v)
    text = r.render()
    assert ('# TYPE conn_total counter\nconn_total{listener="a"} 3\n'
            'conn_total{listener="b\\"x"} 1\n') in text
    assert "active 3\n" in text
    assert 'lat_seconds_bucket{le="0.1"} 1\n' in text
    assert 'lat_seconds_bucket{le="1"} 2\n' in text
    assert 'lat_seconds_bucket{le="+Inf"} 3\n' in text
    assert "lat_seconds_sum 5.55\nlat_seconds_count 3\n" in text


def test_callback_gauge_and_misuse() -> None:
    r = Registry()
    r.gauge("answer", "Computed at scrape.", callback=lambda: 42)
    assert "answer 42\n" in r.render()
    with pytest.raises(ValueError, match="twice"):
        r.counter("answer", "dup")
    c = r.counter("x_total", "X.", ["a"])
    with pytest.raises(ValueError):
        c.labels("1", "2")
    with pytest.raises(ValueError):
        c.labels("1").inc(-1)
