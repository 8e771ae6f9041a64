"""Durability of the Redis store as an operator meets it, through `serve`
and a real redis-server: a Redis that answers but refuses writes, a Redis
killed (SIGKILL) and started again in the middle of a burst of streams, with
and without persistence, and a Redis that is down when the proxy starts.

The proxy answers every client all the same, /readyz and
`reasoning_proxy_store_up` say whether turns are being kept, it recovers by
itself when Redis is back, and it never stores a turn twice. Redis keeps
what it persisted: with an append-only file synced on every write, every
turn whose client read `[DONE]` before the kill; without persistence,
nothing from before the kill."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer, wait_until
from tests.stores.test_durability_sqlite import _answer, _content, _health, _stored, _stream

REFUSALS = {
    # a full Redis that may not evict
    "maxmemory": (["maxmemory", "1", "maxmemory-policy", "noeviction"], ["maxmemory", "0"]),
    # a primary without the replicas it must write to
    "min-replicas": (["min-replicas-to-write", "1"], ["min-replicas-to-write", "0"]),
}


def _proxy(tmp_path: Path, upstream: FakeUpstream, url: str, name: str) -> ProxyProcess:
    args = ["--upstream", upstream.url, "--store", url]
    return ProxyProcess(args, log=tmp_path / f"{name}.log")


def _contents(url: str) -> Counter[str]:
    """Every stored turn's answer text, counted, read from Redis itself."""
    found: Counter[str] = Counter()
    with redis.Redis.from_url(url) as raw:
        for key in raw.scan_iter(match="rp:{*}:turns"):
            for record in raw.lrange(key, 0, -1):
                turn = orjson.loads(record)
                found["".join(p.get("text", "") for p in turn["parts"])] += 1
    return found


@pytest.mark.parametrize("how", [*REFUSALS, "replica"])
def test_a_redis_that_refuses_writes_is_reported_and_recovered_from(
    tmp_path: Path, upstream: FakeUpstream, how: str
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    conversation = f"refused-{how}"
    try:
        with (
            _proxy(tmp_path, upstream, server.url, "proxy") as proxy,
            redis.Redis.from_url(server.url) as raw,
        ):
            upstream.script(_answer("before"))
            assert _stream(proxy.base, conversation) == (_content("before"), True)
            assert _health(proxy)[:2] == (200, 1.0)

            if how == "replica":
                raw.replicaof("127.0.0.1", "1")  # a primary that is not there
            else:
                raw.config_set(*REFUSALS[how][0][:2])
                if len(REFUSALS[how][0]) > 2:
                    raw.config_set(*REFUSALS[how][0][2:])
            for n in range(2):
                upstream.script(_answer(f"refused{n}"))
                assert _stream(proxy.base, conversation) == (_content(f"refused{n}"), True)
            ready, up, errors = _health(proxy)
            assert (ready, up, errors) == (503, 0.0, 2.0)
            text = proxy.log.read_text()
            assert "Traceback" not in text
            assert text.count("turns are not persisted") == 1

            if how == "replica":
                raw.replicaof("NO", "ONE")
            else:
                raw.config_set(*REFUSALS[how][1])
            assert httpx.get(proxy.base + "/readyz", timeout=30).status_code == 200
            upstream.script(_answer("after"))
            assert _stream(proxy.base, conversation) == (_content("after"), True)
            assert _health(proxy)[:2] == (200, 1.0)
            assert _stored(proxy, conversation) == [_content("before"), _content("after")]
    finally:
        server.stop()


GROUP = 10  # streams per group: done before the kill, while Redis is down, after


@pytest.mark.parametrize("persistence", ["aof", "none"])
def test_redis_killed_and_restarted_in_a_burst_of_streams(
    tmp_path: Path, upstream: FakeUpstream, persistence: str
) -> None:
    extra = ["--appendonly", "yes", "--appendfsync", "always"] if persistence == "aof" else []
    server = RedisServer(tmp_path / "redis", *extra).start()
    down, back = threading.Event(), threading.Event()
    answers = [_answer(f"a{n}") for n in range(GROUP)]
    for group, gate in (("b", down), ("c", back)):
        for n in range(GROUP):
            answer = _answer(f"{group}{n}", gate_after=2)
            answer.gate = gate
            answers.append(answer)
    upstream.script(*answers)
    try:
        with _proxy(tmp_path, upstream, server.url, "proxy") as proxy:
            results: dict[int, tuple[str, bool]] = {}
            with ThreadPoolExecutor(3 * GROUP) as pool:
                futures = [pool.submit(_stream, proxy.base, f"burst{n}") for n in range(3 * GROUP)]
                for n, future in enumerate(futures):
                    future.add_done_callback(lambda f, n=n: results.__setitem__(n, f.result()))
                wait_until(lambda: len(results) == GROUP, timeout=60, what="the first group")
                server.kill()  # 20 streams are in the middle of their answer
                down.set()
                wait_until(lambda: len(results) == 2 * GROUP, timeout=60, what="the second group")
                assert _health(proxy)[:2] == (503, 0.0)
                server.start()  # the same port; with persistence, replays its file
                wait_until(
                    lambda: httpx.get(proxy.base + "/readyz", timeout=30).status_code == 200,
                    what="the proxy to see Redis back",
                )
                back.set()
            answered = {text for text, done in results.values() if done}
            assert len(answered) == 3 * GROUP  # every client got its whole answer
            assert _health(proxy)[:2] == (200, 1.0)
            log = proxy.log.read_text()
            assert "Traceback" not in log
            assert log.count("turns are not persisted") == 1
            assert log.count("store is back") == 1

        stored = _contents(server.url)
        assert max(stored.values(), default=1) == 1, "a turn is stored twice"
        groups = Counter(text[0] for text in stored)
        print(
            f"\nRedis ({persistence}) killed mid-burst: {3 * GROUP} answered, stored {dict(groups)}"
        )
        expected = {"c": GROUP} if persistence == "none" else {"a": GROUP, "c": GROUP}
        assert dict(groups) == expected
        assert set(stored) <= answered
    finally:
        server.stop()


def test_a_redis_down_at_start_is_not_ready_then_is_used_once_it_comes_up(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    server = RedisServer(tmp_path / "redis")  # its port, nobody listening yet
    try:
        with _proxy(tmp_path, upstream, server.url, "proxy") as proxy:
            assert httpx.get(proxy.base + "/readyz", timeout=30).status_code == 503
            upstream.script(_answer("early"))
            assert _stream(proxy.base, "late-redis") == (_content("early"), True)
            assert _health(proxy)[:2] == (503, 0.0)

            server.start()
            wait_until(
                lambda: httpx.get(proxy.base + "/readyz", timeout=30).status_code == 200,
                what="the proxy to see Redis come up",
            )
            upstream.script(_answer("late"))
            assert _stream(proxy.base, "late-redis") == (_content("late"), True)
            assert _health(proxy)[:2] == (200, 1.0)
            assert _stored(proxy, "late-redis") == [_content("late")]
            assert "Traceback" not in proxy.log.read_text()
    finally:
        server.stop()
