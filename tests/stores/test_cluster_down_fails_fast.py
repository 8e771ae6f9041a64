"""A Redis Cluster that lost a master with no replica to take its place
says it is down (CLUSTERDOWN) to every command, on every master. The proxy
answers on as with any store outage, and fast: the first call that meets
CLUSTERDOWN waits for the cluster (a master just restarted says so for 2 s),
the calls after it fail at once while the cluster still says so, and turns
are stored again once the master is back.

Regression: every store call waited SETTLE_SECONDS (3 s) for the cluster
to settle, as for a slot in migration, so every request took 1.5 to 4 s
longer for as long as the outage lasted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream, Json
from tests.stores.cluster import LocalCluster
from tests.stores.servers import ProxyProcess, wait_until

KEY = {"Authorization": "Bearer sk-cluster-down"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of its own: this test stops one of its masters."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _answer(text: str) -> Json:
    message = {"role": "assistant", "content": text, "reasoning_content": "thinking"}
    return Json({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def _ask(http: httpx.Client, upstream: FakeUpstream, conversation: str, text: str) -> float:
    """Seconds one chat completion took; it must succeed."""
    upstream.script(_answer(text))
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    started = time.monotonic()
    response = http.post(
        "/v1/chat/completions", json=body, headers={**KEY, "X-Conversation-Id": conversation}
    )
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def test_requests_stay_fast_while_the_cluster_is_down(
    tmp_path: Path, upstream: FakeUpstream, cluster: LocalCluster
) -> None:
    lost, survivor = cluster.nodes[-1], cluster.nodes[0]
    args = ["--upstream", upstream.url, "--store", cluster.url]
    with (
        ProxyProcess(args, log=tmp_path / "proxy.log") as proxy,
        httpx.Client(base_url=proxy.base, timeout=30) as http,
    ):
        # a conversation on a master that stays: its calls meet CLUSTERDOWN
        conversation = ""
        for _ in range(50):
            conversation = f"down-{uuid.uuid4().hex[:8]}"
            _ask(http, upstream, conversation, "before")
            if not any(conversation in key for key in lost.key_names()):
                break
        lost.server.kill()
        wait_until(
            lambda: b"cluster_state:fail" in survivor.call("CLUSTER", "INFO"),  # type: ignore[operator]
            timeout=60,
            what="the cluster to say it is down",
        )
        assert http.get("/readyz").status_code == 503

        _ask(http, upstream, conversation, "first")  # may wait for the cluster once
        took = [_ask(http, upstream, conversation, f"during {n}") for n in range(5)]
        assert sum(took) < 2.0, took  # each waited 1.5 to 3 s here before

        lost.server.start()
        wait_until(lambda: http.get("/readyz").status_code == 200, timeout=60, what="/readyz")
        _ask(http, upstream, conversation, "after")
        stored = http.get(f"/v1/conversations/{conversation}", headers=KEY).json()
        assert [t["content"] for t in stored["turns"]][-1] == "after"
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
