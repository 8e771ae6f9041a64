"""/metrics: request duration and upstream time-to-first-byte histograms,
the in-flight gauge, process and platform collectors, build info, no
*_created series, OpenMetrics on request, store lookups counted, and help
texts that say what the README says. Every count is an exact delta."""

from __future__ import annotations

import platform
import re
import threading
from pathlib import Path
from typing import Any

import httpx

from proxy import package_version
from proxy.observability import Metrics
from proxy.tally import Family
from tests.casefiles import chunk
from tests.harness import FakeUpstream, Stream, route_config, running_proxy
from tests.metrics_samples import Samples, scrape
from tests.stores.servers import ProxyProcess, wait_until

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
KEY = {"Authorization": "Bearer sk-metrics-test"}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def readme_metrics() -> dict[str, tuple[str, str, str]]:
    """name -> (type, labels, help) from the README's metrics table."""
    start = README.index("| metric | type | labels | help |")
    rows = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, kind, labels, help_text = (c.strip() for c in line.strip("|").split("|"))
        rows[name.strip("`")] = (kind, labels.replace("`", ""), help_text)
    return rows


def test_help_texts_types_and_labels_match_the_readme() -> None:
    documented = readme_metrics()
    families = {
        f.name: f for f in Metrics().registry.collect() if f.name.startswith("reasoning_proxy_")
    }
    exposed = {name + ("_total" if f.type == "counter" else ""): f for name, f in families.items()}
    assert set(documented) == set(exposed)
    metrics = Metrics()
    for name, (kind, labels, help_text) in documented.items():
        family = exposed[name]
        assert family.documentation == help_text, name
        assert family.type == kind, name
        metric = next(
            m
            for m in vars(metrics).values()
            if isinstance(m, Family) and m.name == name.removesuffix("_total")
        )
        assert ", ".join(metric.labelnames) == labels, name


def test_request_histograms_build_info_collectors_and_store_lookups(
    upstream: FakeUpstream,
) -> None:
    answer = Stream([chunk({"reasoning_content": "r"}), chunk({"content": "hello"}, "stop")])
    with running_proxy(route_config(upstream)) as proxy:
        before = scrape(proxy.base)

        def chat(messages: list[Any], **headers: str) -> None:
            upstream.script(answer)
            response = httpx.post(
                f"{proxy.url}/chat/completions",
                headers={**KEY, **headers},
                json={"model": "m", "stream": True, "messages": messages},
                timeout=30,
            )
            assert response.status_code == 200

        user = {"role": "user", "content": "hi"}
        history = [user, {"role": "assistant", "content": "hello"}, user]
        chat([user])  # no assistant message: nothing to look up
        chat(history)  # one lookup for its conversation, one for its reasoning
        chat(history, **{"X-Conversation-Id": "named"})  # one read of "named"
        assert httpx.get(f"{proxy.url}/models", timeout=10).status_code == 200
        assert httpx.get(f"{proxy.url}/conversations/named", headers=KEY).status_code == 200
        assert httpx.get(f"{proxy.url}/conversations", headers=KEY).status_code == 200

        def answered(samples: Samples) -> float:
            return sum(v for (n, _), v in samples.items() if n == "reasoning_proxy_requests_total")

        # each request is counted just after its last byte: 6, plus the first scrape
        wait_until(lambda: answered(scrape(proxy.base)) - answered(before) >= 7, what="counts")
        after = scrape(proxy.base)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    chat_labels = {"route": "test", "endpoint": "chat.completions"}
    passthrough = {"route": "test", "endpoint": "passthrough"}
    assert moved("reasoning_proxy_request_duration_seconds_count", **chat_labels) == 3
    assert moved("reasoning_proxy_request_duration_seconds_sum", **chat_labels) > 0
    assert moved("reasoning_proxy_upstream_ttfb_seconds_count", **chat_labels) == 3
    assert moved("reasoning_proxy_request_duration_seconds_count", **passthrough) == 1
    assert moved("reasoning_proxy_upstream_ttfb_seconds_count", **passthrough) == 1
    conversations = {"route": "-", "endpoint": "conversations"}
    assert moved("reasoning_proxy_request_duration_seconds_count", **conversations) == 2
    assert moved("reasoning_proxy_upstream_ttfb_seconds_count", **conversations) == 0
    # the scrapes made in wait_until count too: at least the first one
    assert moved("reasoning_proxy_requests_total", route="-", endpoint="metrics", status="200") >= 1
    # the histogram's buckets add up to its count
    inf = value(after, "reasoning_proxy_request_duration_seconds_bucket", le="+Inf", **chat_labels)
    assert inf == value(after, "reasoning_proxy_request_duration_seconds_count", **chat_labels)

    ops = "reasoning_proxy_store_operations_total"
    assert moved(ops, op="lookup", result="ok") == 2
    assert moved(ops, op="read", result="ok") == 2  # the plan's, and the API's GET
    assert moved(ops, op="list", result="ok") == 1
    assert moved(ops, op="append", result="ok") == 3
    assert moved(ops, op="stats", result="ok") >= 1
    assert not [k for k in after if k[1] and ("result", "error") in k[1]]

    info = value(
        after,
        "reasoning_proxy_build_info",
        version=package_version(),
        python=platform.python_version(),
    )
    assert info == 1
    names = {name for name, _ in after}
    assert "process_cpu_seconds_total" in names
    assert "process_resident_memory_bytes" in names
    assert "python_info" in names
    assert not [n for n in names if n.endswith("_created")]
    # nothing is in flight once every response has ended, but the scrape itself
    assert value(after, "reasoning_proxy_requests_in_flight", endpoint="chat.completions") == 0
    assert value(after, "reasoning_proxy_requests_in_flight", endpoint="metrics") == 1


def test_in_flight_counts_a_running_stream(upstream: FakeUpstream) -> None:
    slow = Stream([chunk({"content": "a"}), chunk({"content": "b"}), chunk({}, "stop")], delay=0.4)
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(slow)
        result: list[int] = []

        def run() -> None:
            response = httpx.post(
                f"{proxy.url}/chat/completions",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]},
                timeout=30,
            )
            result.append(response.status_code)

        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: len(upstream.chat_requests()) == 1, what="the upstream request")
        during = scrape(proxy.base)
        thread.join(30)
        wait_until(
            lambda: (
                value(
                    scrape(proxy.base),
                    "reasoning_proxy_requests_in_flight",
                    endpoint="chat.completions",
                )
                == 0
            ),
            what="the stream to end",
        )
    assert result == [200]
    assert value(during, "reasoning_proxy_requests_in_flight", endpoint="chat.completions") == 1


def test_openmetrics_when_the_scraper_asks_for_it(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        plain = httpx.get(f"{proxy.base}/metrics", timeout=10)
        open_metrics = httpx.get(
            f"{proxy.base}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0,text/plain;q=0.5"},
            timeout=10,
        )
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert not plain.text.rstrip().endswith("# EOF")
    assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
    assert open_metrics.text.endswith("# EOF\n")
    assert "# TYPE reasoning_proxy_requests counter" in open_metrics.text
    assert not re.search(r"^\w+_created[{ ]", open_metrics.text, re.M)


def test_with_workers_one_exposition_adds_up_every_process(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'history.db'}"
    args = ["--upstream", upstream.url, "--store", store, "--workers", "2"]
    with ProxyProcess(args, log=tmp_path / "proxy.log") as proxy:
        for _ in range(4):
            upstream.script(Stream([chunk({"content": "a"}), chunk({}, "stop")]))
            response = httpx.post(
                f"{proxy.url}/chat/completions",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]},
                timeout=30,
            )
            assert response.status_code == 200
        # each scrape on a new connection: the workers take turns as they accept
        scrapes = [scrape(proxy.base) for _ in range(6)]
    labels = {"route": "default", "endpoint": "chat.completions"}
    for samples in scrapes:
        names = {name for name, _ in samples}
        builds = [k for k in samples if k[0] == "reasoning_proxy_build_info"]
        assert len(builds) == 1
        assert samples[builds[0]] == 1
        assert not [n for n in names if n.startswith("process_") or n.endswith("_created")]
        assert "python_info" in names
        assert value(samples, "reasoning_proxy_request_duration_seconds_count", **labels) == 4
        assert value(samples, "reasoning_proxy_requests_in_flight", endpoint="metrics") == 1
        assert (
            value(samples, "reasoning_proxy_requests_in_flight", endpoint="chat.completions") == 0
        )
