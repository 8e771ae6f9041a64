"""End to end on a real three-master Redis Cluster: proxies started with
`--store redis+cluster://...` share history whose conversations land on
several masters; slots move between masters while requests run and no
turn is lost; the live view goes through the cluster's pub/sub."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from proxy.live_redis import RedisLiveFeed
from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.stores.cluster import LocalCluster, Node
from tests.stores.kimi import (
    assert_reinjected,
    kimi_config,
    replay_without_reasoning,
    store_tool_call_turn,
    stored_turns,
)
from tests.stores.servers import ProxyProcess, wait_until

DEADLINE = 10.0  # seconds: correctness deadlines, not speed


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of its own: these tests move its slots."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _ok() -> dict[str, object]:
    return {
        "id": "chatcmpl-ok",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok", "reasoning_content": "hm"},
                "finish_reason": "stop",
            }
        ],
    }


def _turn_keys(cluster: LocalCluster, marker: str) -> dict[str, Node]:
    """The turns keys of the conversations whose id holds `marker`, and their masters."""
    found: dict[str, Node] = {}
    for node in cluster.nodes:
        for key in node.key_names():
            if marker in key and key.endswith("}:turns"):
                found[key] = node
    return found


def test_replicas_share_history_spread_over_the_masters(
    tmp_path: Path, upstream: FakeUpstream, redis_cluster: LocalCluster
) -> None:
    run = uuid.uuid4().hex[:8]
    conversations = [f"spread-{run}-{i}" for i in range(6)]
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", redis_cluster.url]
    with (
        ProxyProcess(args, log=tmp_path / "a.log") as a,
        ProxyProcess(args, log=tmp_path / "b.log") as b,
    ):
        for conversation in conversations:
            store_tool_call_turn(a.base, upstream, conversation)
            # the other replica finds the tool call's reasoning and re-injects it
            assert_reinjected(replay_without_reasoning(b.base, upstream, conversation))
            for replica in (a, b):
                assert len(stored_turns(replica.base, conversation).json()["turns"]) == 2
        ready = httpx.get(a.base + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
    holders = _turn_keys(redis_cluster, f"spread-{run}-")
    assert len(holders) == len(conversations)
    assert len(set(node.port for node in holders.values())) > 1, holders


def test_no_turn_is_lost_while_slots_move_between_masters(
    cluster: LocalCluster, upstream: FakeUpstream
) -> None:
    conversations = [f"moving-{i}" for i in range(6)]
    requests = 40
    upstream.script(*[Json(_ok(), delay=0.03) for _ in range(len(conversations) * requests)])
    config = route_config(upstream, top={"store": {"url": cluster.url}})
    statuses: dict[str, list[int]] = {c: [] for c in conversations}
    running = threading.Event()
    running.set()

    with running_proxy(config) as proxy:

        def talk(conversation: str) -> None:
            headers = {"Authorization": "Bearer sk-moving", "X-Conversation-Id": conversation}
            with httpx.Client(base_url=proxy.base, timeout=30) as http:
                for n in range(requests):
                    body = {"model": "m", "messages": [{"role": "user", "content": f"q{n}"}]}
                    r = http.post("/v1/chat/completions", json=body, headers=headers)
                    statuses[conversation].append(r.status_code)

        with ThreadPoolExecutor(len(conversations)) as pool:
            talking = [pool.submit(talk, c) for c in conversations]
            wait_until(
                lambda: len(_turn_keys(cluster, "moving-")) == len(conversations),
                what="a first turn of every conversation",
            )
            keys = list(_turn_keys(cluster, "moving-"))
            tenant_tag = keys[0].split("{", 1)[1].split(":", 1)[0]
            slots = {cluster.slot(k) for k in keys}
            slots |= {cluster.slot(f"rp:{{{tenant_tag}}}:index"), cluster.slot("rp:recent")}
            moves = keys_moved = 0
            while not all(f.done() for f in talking):
                for slot in sorted(slots):
                    owner = cluster.owner(slot)
                    target = cluster.nodes[(cluster.nodes.index(owner) + 1) % 3]
                    # a pause between keys keeps the slot half-moved for a while
                    keys_moved += cluster.migrate(slot, target, pause=0.02)
                    moves += 1
            for f in talking:
                f.result()

        assert moves >= len(slots), "the requests ended before every slot moved once"
        assert keys_moved > 0
        for conversation in conversations:
            assert statuses[conversation] == [200] * requests
        assert proxy.runtime.health.failures == 0
        with httpx.Client(base_url=proxy.base, timeout=30) as http:
            for conversation in conversations:
                headers = {"Authorization": "Bearer sk-moving"}
                turns = http.get(f"/v1/conversations/{conversation}", headers=headers)
                assert len(turns.json()["turns"]) == requests, conversation
        retried = getattr(proxy.runtime.store, "unsettled", None)
    print(f"\nslot moves: {moves} over {len(slots)} slots, keys moved: {keys_moved}, ", end="")
    print(f"requests: {len(conversations) * requests}, store calls tried again: {retried}")


def test_redis_cli_reshard_under_traffic_loses_no_turn(
    cluster: LocalCluster, upstream: FakeUpstream
) -> None:
    conversations = [f"reshard-{i}" for i in range(8)]
    config = route_config(upstream, top={"store": {"url": cluster.url}})
    statuses: dict[str, list[int]] = {c: [] for c in conversations}
    stop = threading.Event()
    with running_proxy(config) as proxy:

        def talk(conversation: str) -> None:
            headers = {"Authorization": "Bearer sk-reshard", "X-Conversation-Id": conversation}
            with httpx.Client(base_url=proxy.base, timeout=30) as http:
                n = 0
                while not stop.is_set():
                    body = {"model": "m", "messages": [{"role": "user", "content": f"q{n}"}]}
                    r = http.post("/v1/chat/completions", json=body, headers=headers)
                    statuses[conversation].append(r.status_code)
                    n += 1
                    stop.wait(0.01)

        with ThreadPoolExecutor(len(conversations)) as pool:
            talking = [pool.submit(talk, c) for c in conversations]
            wait_until(
                lambda: len(_turn_keys(cluster, "reshard-")) == len(conversations),
                what="a first turn of every conversation",
            )
            # every slot of the master holding the most conversations moves away
            held = Counter(node.port for node in _turn_keys(cluster, "reshard-").values())
            source = next(n for n in cluster.nodes if n.port == held.most_common(1)[0][0])
            target = cluster.nodes[(cluster.nodes.index(source) + 1) % 3]
            cluster.reshard(source, target, 16384)  # all it has
            stop.set()
            for f in talking:
                f.result()
        assert source.key_names() == []  # everything it held lives elsewhere now
        for conversation in conversations:
            assert set(statuses[conversation]) == {200}
        assert proxy.runtime.health.failures == 0
        with httpx.Client(base_url=proxy.base, timeout=30) as http:
            for conversation in conversations:
                headers = {"Authorization": "Bearer sk-reshard"}
                turns = http.get(f"/v1/conversations/{conversation}", headers=headers)
                assert len(turns.json()["turns"]) == len(statuses[conversation]), conversation
        retried = getattr(proxy.runtime.store, "unsettled", None)
    total = sum(len(v) for v in statuses.values())
    print(
        f"\nreshard: {held[source.port]} conversation(s) moved with every slot of a master, ",
        end="",
    )
    print(f"requests: {total}, store calls tried again: {retried}")


def test_the_live_view_goes_through_the_cluster(redis_cluster: LocalCluster) -> None:
    async def scenario() -> None:
        a = RedisLiveFeed(redis_cluster.url, secret=b"cluster-secret")
        b = RedisLiveFeed(redis_cluster.url, secret=b"cluster-secret")
        await a.start()
        await b.start()
        try:
            with a.subscribe("alice") as alice:
                deadline = asyncio.get_running_loop().time() + DEADLINE
                while not b.active:
                    assert asyncio.get_running_loop().time() < deadline, "B never saw A's viewer"
                    await asyncio.sleep(0.01)
                b.publish("alice", {"type": "delta", "text": "through the cluster"})
                event = await asyncio.wait_for(alice.queue.get(), DEADLINE)
                assert event == {"type": "delta", "text": "through the cluster"}
        finally:
            await a.close()
            await b.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, scenario()).result()


def test_readyz_says_503_while_one_master_refuses_writes(
    tmp_path: Path, upstream: FakeUpstream, redis_cluster: LocalCluster
) -> None:
    """The cluster's state is `ok` while a master without the replicas it
    must write to (min-replicas-to-write) refuses every write: readiness
    asks each master for a write, as it asks a single server."""
    args = ["--upstream", upstream.url, "--store", redis_cluster.url]
    last = redis_cluster.nodes[-1]
    with ProxyProcess(args, log=tmp_path / "proxy.log") as proxy:
        assert httpx.get(proxy.base + "/readyz", timeout=10).status_code == 200
        last.call("CONFIG", "SET", "min-replicas-to-write", "1")
        try:
            ready = httpx.get(proxy.base + "/readyz", timeout=10)
            assert ready.status_code == 503, ready.text
            assert ready.json()["store"] == "down"
        finally:
            last.call("CONFIG", "SET", "min-replicas-to-write", "0")
        assert httpx.get(proxy.base + "/readyz", timeout=10).status_code == 200
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
