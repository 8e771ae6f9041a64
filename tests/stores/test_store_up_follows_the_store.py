"""`reasoning_proxy_store_up` as an operator's alert reads it, through `serve
--workers 2` and a real redis-server: it agrees with /readyz when Redis
goes away while no request writes, and it comes back to 1 once Redis is
back, in every worker, without waiting for a request to write a turn."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer, wait_until
from tests.stores.test_durability_sqlite import AUTH, _answer, _content, _stream


def _store_up(proxy: ProxyProcess) -> float:
    """The gauge over every worker (the lowest: one worker that finds the
    store down is enough)."""
    for line in httpx.get(proxy.base + "/metrics", timeout=30).text.splitlines():
        if line.startswith("reasoning_proxy_store_up "):
            return float(line.split()[-1])
    raise AssertionError("no reasoning_proxy_store_up in /metrics")


def _ready(proxy: ProxyProcess) -> int:
    return httpx.get(proxy.base + "/readyz", timeout=30).status_code


def test_store_up_agrees_with_readyz_and_recovers_without_traffic(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes").start()
    args = ["--upstream", upstream.url, "--store", server.url, "--workers", "2"]
    try:
        with ProxyProcess(args, log=tmp_path / "proxy.log") as proxy:
            upstream.script(_answer("before"))
            assert _stream(proxy.base, "up") == (_content("before"), True)
            assert (_ready(proxy), _store_up(proxy)) == (200, 1.0)

            server.stop()  # no request writes while it is away
            assert _ready(proxy) == 503
            assert _store_up(proxy) == 0.0

            upstream.script(_answer("during"))
            assert _stream(proxy.base, "up") == (_content("during"), True)
            assert _store_up(proxy) == 0.0

            server.start()  # the same port, its append-only file replayed
            # nothing but scrapes: each worker finds the store back by itself
            wait_until(lambda: _store_up(proxy) == 1.0, timeout=20, what="store_up back to 1")
            assert _ready(proxy) == 200
            upstream.script(_answer("after"))
            assert _stream(proxy.base, "up") == (_content("after"), True)
            turns = httpx.get(f"{proxy.url}/conversations/up", headers=AUTH, timeout=30).json()[
                "turns"
            ]
            assert [t["content"] for t in turns] == [_content("before"), _content("after")]
            log = proxy.log.read_text()
            assert "Traceback" not in log
            assert 1 <= log.count("turns are not persisted") <= 2  # once per worker, at most
            assert log.count("store is back") >= 1
    finally:
        server.stop()
