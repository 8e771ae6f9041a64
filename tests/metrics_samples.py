"""The proxy's /metrics as numbers: scraped over a real socket and compared
before and after a request."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

# (sample name, its labels sorted) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> Samples:
    """Every sample of the proxy at `base`, in Prometheus' text format."""
    response = httpx.get(f"{base}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def moved(before: Samples, after: Samples, name: str, by: str = "dialect") -> dict[str, float]:
    """How much the samples of `name` moved, by the value of their label `by`."""
    out = {}
    for (sample, labels), value in after.items():
        if sample == name and value != before.get((sample, labels), 0.0):
            out[dict(labels)[by]] = value - before.get((sample, labels), 0.0)
    return out
