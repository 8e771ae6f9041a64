"""A Redis Cluster master that restarts holds its slots down for about two
seconds (it answers CLUSTERDOWN to every command on a key) while the other
masters already say the cluster is ok. Readiness asks every master for its
own state, so `/readyz` says 503 until the restarted one serves its slots
again, whichever node it would have asked.

Regression: the store's ping read the state of one random node, so
`/readyz` answered 200 about two times in three during that window, while
every write to the restarted master's slots stalled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.exceptions import RedisError

from tests.harness import FakeUpstream
from tests.stores.cluster import LocalCluster, Node
from tests.stores.servers import ProxyProcess, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of its own: this test restarts one of its masters."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _state(node: Node) -> str:
    try:
        info = node.call("CLUSTER", "INFO")
    except RedisError:
        return "unreachable"
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "ok" if "cluster_state:ok" in text else "fail"


def test_readyz_says_503_until_a_restarted_master_serves_its_slots(
    tmp_path: Path, upstream: FakeUpstream, cluster: LocalCluster
) -> None:
    args = ["--upstream", upstream.url, "--store", cluster.url]
    restarted = cluster.nodes[-1]
    with ProxyProcess(args, log=tmp_path / "proxy.log") as proxy:

        def ready() -> int:
            return httpx.get(proxy.base + "/readyz", timeout=10).status_code

        assert ready() == 200
        restarted.server.kill()
        wait_until(lambda: ready() == 503, what="/readyz to see the master gone")
        restarted.server.start()

        answers_while_down: list[int] = []
        deadline = time.monotonic() + 30
        while True:
            before = _state(restarted)
            if before == "ok":
                break
            assert time.monotonic() < deadline, "the restarted master never came back"
            status = ready()
            if before == "fail" and _state(restarted) == "fail":
                answers_while_down.append(status)
        assert answers_while_down, "the restarted master was never seen down"
        assert set(answers_while_down) == {503}, answers_while_down
        wait_until(lambda: ready() == 200, what="/readyz once every master is ok")
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
