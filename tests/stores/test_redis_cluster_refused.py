"""A Redis Cluster node given as a plain redis:// URL: its writes would fail
on MOVED, so the proxy must not report ready and silently lose turns. It
refuses to start when the node answers at start-up (naming
redis+cluster://, the URL a cluster needs), and /readyz says 503 (the
store's ping fails) when the node shows up only later. The other way round,
redis+cluster:// naming a standalone server, is refused the same way."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.errors import ConfigError
from proxy.stores import check_store
from tests.harness import FakeUpstream, free_port, route_config, running_proxy
from tests.stores.servers import RedisServer, serve_command


@pytest.fixture
def cluster_node(tmp_path: Path) -> Iterator[RedisServer]:
    """One redis-server in cluster mode (no slots assigned: enough to be one)."""
    # (its bus port is chosen too: the default, port + 10000, may not exist)
    cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    node = RedisServer(tmp_path / "node", *cluster, "--cluster-port", str(free_port())).start()
    try:
        yield node
    finally:
        node.stop()


def test_check_store_refuses_a_cluster_node_and_passes_a_standalone_server(
    cluster_node: RedisServer, redis_server: RedisServer
) -> None:
    with pytest.raises(ConfigError, match=r"Redis Cluster node: .* redis\+cluster://"):
        check_store(cluster_node.url)
    check_store(redis_server.url)
    check_store(f"redis://127.0.0.1:{free_port()}/0")  # down now: the proxy may start


def test_check_store_refuses_a_cluster_url_naming_a_standalone_server(
    redis_server: RedisServer,
) -> None:
    with pytest.raises(ConfigError, match="not in cluster mode: use redis://"):
        check_store(f"redis+cluster://127.0.0.1:{redis_server.port}")
    check_store(f"redis+cluster://127.0.0.1:{free_port()}")  # down now: the proxy may start


def test_serve_on_a_cluster_node_stops_at_start(
    cluster_node: RedisServer, upstream: FakeUpstream
) -> None:
    port = str(free_port())
    command = serve_command("--upstream", upstream.url, "--store", cluster_node.url, "--port", port)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "names a Redis Cluster node" in done.stderr
    assert "redis+cluster://" in done.stderr
    assert cluster_node.url not in done.stderr


def test_a_cluster_node_found_after_start_makes_the_proxy_not_ready(
    cluster_node: RedisServer, upstream: FakeUpstream
) -> None:
    config = route_config(upstream, top={"store": {"url": cluster_node.url}})
    with running_proxy(config) as proxy:
        ready = httpx.get(proxy.base + "/readyz", timeout=10)
        assert ready.status_code == 503
        assert ready.json()["store"] == "down"
