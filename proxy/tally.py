"""Tally: Prometheus counters, gauges and histograms kept as plain numbers.

prometheus-client's metrics take a lock and check their state on every
`inc` or `observe` (a histogram's `observe` walks its buckets and takes two
locks); a proxied request touches about a dozen of them. The proxy updates
its metrics from one event loop, so a Tally keeps them as plain ints and
floats, and turns them into metric families only when /metrics is
scraped (`Tally.collect`, registered as a collector). The exposition is
what prometheus-client's own metrics write for the same updates
(tests/test_tally.py renders both and compares).

With several workers the numbers must live in prometheus-client's shared
files, so `proxy.observability.Metrics` uses its metrics then, and a Tally
only for one process. Nothing here does I/O or takes a lock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

Kind = Literal["counter", "gauge", "histogram"]
S = TypeVar("S")
F = TypeVar("F", bound="Family[Any]")


class _Value:
    """One labelled series of a counter or a gauge."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class _CounterValue(_Value):
    """A counter's series: it only goes up."""

    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class _Buckets:
    """One labelled series of a histogram: a count per bucket (not
    cumulative; the last is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # the first bucket whose upper bound is >= amount, as prometheus-client
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class Family(Generic[S]):
    """A metric and its labelled series (`labels(...)`). One with no label
    names is its own one series: its updates go to it."""

    kind: Kind

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.series: dict[tuple[str, ...], S] = {}
        self._one = None if self.labelnames else self.labels()

    def _new(self) -> S:
        raise NotImplementedError

    def labels(self, *values: str) -> S:
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")
            key = tuple(str(v) for v in values)
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = self._new()
        return series

    def _only(self) -> S:
        if self._one is None:
            raise ValueError(f"{self.name} has labels: use labels()")
        return self._one

    def metric(self, samples: bool = True) -> Metric:
        """This family as prometheus-client's exposition reads it."""
        raise NotImplementedError


class _ValueFamily(Family[_Value]):
    def _new(self) -> _Value:
        return _Value()

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)

    def metric(self, samples: bool = True) -> Metric:
        family: CounterMetricFamily | GaugeMetricFamily
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()) if samples else ():
            family.add_metric(values, series.value)
        return family


class CounterFamily(_ValueFamily):
    kind = "counter"

    def _new(self) -> _Value:
        return _CounterValue()


class GaugeFamily(_ValueFamily):
    kind = "gauge"

    def dec(self, amount: float = 1) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)


class HistogramFamily(Family[_Buckets]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if bounds and bounds[-1] == float("inf"):
            bounds = bounds[:-1]
        if not bounds or list(bounds) != sorted(bounds):
            raise ValueError(f"{name}: histogram buckets must be given, in order")
        self.bounds = bounds
        super().__init__(name, documentation, labelnames)

    def _new(self) -> _Buckets:
        return _Buckets(self.bounds)

    def observe(self, amount: float) -> None:
        self._only().observe(amount)

    def metric(self, samples: bool = True) -> Metric:
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()) if samples else ():
            histogram.add_metric(values, _cumulative(series), series.sum)
        return histogram


def _cumulative(series: _Buckets) -> list[tuple[str, float]]:
    total = 0
    buckets = []
    for bound, count in zip((*series.bounds, float("inf")), series.counts, strict=True):
        total += count
        buckets.append((floatToGoString(bound), float(total)))  # type: ignore[no-untyped-call]
    return buckets


class Tally:
    """The families of one process, registered as one collector."""

    def __init__(self) -> None:
        self.families: list[Family[Any]] = []

    def counter(
        self, name: str, documentation: str, labelnames: Sequence[str] = ()
    ) -> CounterFamily:
        return self._add(CounterFamily(name, documentation, labelnames))

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> GaugeFamily:
        return self._add(GaugeFamily(name, documentation, labelnames))

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> HistogramFamily:
        return self._add(HistogramFamily(name, documentation, labelnames, buckets=buckets))

    def _add(self, family: F) -> F:
        self.families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.metric()

    def describe(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.metric(samples=False)
