"""The Tally writes what prometheus-client's own metrics write: the same
updates go to both, and both registries' expositions (text and OpenMetrics)
are compared byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from proxy.observability import DURATION_BUCKETS
from proxy.tally import Tally

BUCKETS = (0.005, 0.01, 0.25, 1.0, 10.0)


class Pair:
    """A prometheus-client registry and a Tally, updated alike."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # as Metrics() does
        self.registry = CollectorRegistry(auto_describe=True)
        self.mirror = CollectorRegistry(auto_describe=True)
        self.tally = Tally()
        self.mirror.register(self.tally)
        r = self.registry
        t = self.tally
        self.metrics: dict[str, tuple[Any, Any]] = {
            "requests": (
                Counter("t_requests", "Requests.", ["route", "status"], registry=r),
                t.counter("t_requests", "Requests.", ["route", "status"]),
            ),
            "blocks": (
                Counter("t_blocks", "Blocks.", registry=r),
                t.counter("t_blocks", "Blocks."),
            ),
            "in_flight": (
                Gauge("t_in_flight", "In flight.", ["endpoint"], registry=r),
                t.gauge("t_in_flight", "In flight.", ["endpoint"]),
            ),
            "up": (Gauge("t_up", "Up.", registry=r), t.gauge("t_up", "Up.")),
            "duration": (
                Histogram("t_duration", "Seconds.", ["route"], buckets=BUCKETS, registry=r),
                t.histogram("t_duration", "Seconds.", ["route"], buckets=BUCKETS),
            ),
            "latency": (
                Histogram("t_latency", "Added.", buckets=DURATION_BUCKETS, registry=r),
                t.histogram("t_latency", "Added.", buckets=DURATION_BUCKETS),
            ),
        }

    def apply(self, name: str, method: str, labels: tuple[Any, ...], *args: float) -> None:
        for metric in self.metrics[name]:
            target = metric.labels(*labels) if labels else metric
            getattr(target, method)(*args)

    def check(self) -> None:
        assert generate_latest(self.mirror) == generate_latest(self.registry)
        assert generate_openmetrics(self.mirror) == generate_openmetrics(self.registry)


def test_fresh_families_read_alike() -> None:
    Pair().check()


def test_each_kind_reads_alike_after_updates() -> None:
    pair = Pair()
    pair.apply("requests", "inc", ("main", "200"))
    pair.apply("requests", "inc", ("main", 200), 2)  # a label value is written as text
    pair.apply("requests", "inc", ("other", "502"), 0.5)
    pair.apply("blocks", "inc", (), 3)
    pair.apply("in_flight", "inc", ("chat",))
    pair.apply("in_flight", "inc", ("chat",), 2)
    pair.apply("in_flight", "dec", ("chat",))
    pair.apply("in_flight", "set", ("messages",), 7)
    pair.apply("up", "set", (), 1)
    pair.apply("up", "dec", ())
    for value in (0.0, 0.005, 0.0051, 0.25, 3, 10.0, 11, 1e9):
        pair.apply("duration", "observe", ("main",), value)
        pair.apply("latency", "observe", (), value)
    pair.check()
    series = pair.metrics["requests"][1].labels("main", "200")
    assert series is pair.metrics["requests"][1].labels("main", 200)
    assert series.value == 3


@given(st.lists(st.floats(min_value=0, max_value=400, allow_nan=False), max_size=40))
def test_any_observations_fall_in_the_same_buckets(values: list[float]) -> None:
    pair = Pair()
    for value in [*values, *BUCKETS]:  # and each bound itself: it belongs to its own bucket
        pair.apply("duration", "observe", ("r",), value)
        pair.apply("latency", "observe", (), value)
    pair.check()


def test_misuse_is_refused_as_prometheus_client_refuses_it() -> None:
    tally = Tally()
    counter = tally.counter("c", "C.", ["route"])
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("r").inc(-1)
    with pytest.raises(ValueError, match="1 label values expected"):
        counter.labels("r", "extra")
    with pytest.raises(ValueError, match="has labels"):
        counter.inc()
    with pytest.raises(ValueError, match="has labels"):
        tally.histogram("h", "H.", ["route"], buckets=BUCKETS).observe(1)
    with pytest.raises(ValueError, match="in order"):
        tally.histogram("h2", "H.", buckets=(1.0, 0.5))
    assert counter.labels("r").value == 0  # the refused update left nothing
