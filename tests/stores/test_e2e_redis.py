"""End to end on Redis: several proxy processes (replicas, or `--workers`)
sharing one real redis-server, and a Redis that dies in the middle of a
stream and comes back."""

from __future__ import annotations

import subprocess
import threading
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from tests.harness import FakeUpstream, Json, Stream, free_port, route_config, running_proxy
from tests.stores.kimi import (
    assert_reinjected,
    kimi_config,
    replay_without_reasoning,
    store_tool_call_turn,
    stored_turns,
)
from tests.stores.servers import ProxyProcess, RedisServer, serve_command, wait_until


@pytest.mark.parametrize("secret", ["configured", "unset"])
def test_a_turn_stored_through_one_replica_is_reinjected_by_another(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer, secret: str
) -> None:
    conversation = f"replicas-{uuid.uuid4().hex[:8]}"
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", redis_server.url]
    # unset: each replica draws a secret, and both use the one Redis kept first
    env = {"REASONING_PROXY_SECRET": ""} if secret == "unset" else None
    with (
        ProxyProcess(args, log=tmp_path / "a.log", env=env) as a,
        ProxyProcess(args, log=tmp_path / "b.log", env=env) as b,
    ):
        store_tool_call_turn(a.base, upstream, conversation)
        assert_reinjected(replay_without_reasoning(b.base, upstream, conversation))
        for replica in (a, b):
            assert len(stored_turns(replica.base, conversation).json()["turns"]) == 2


@pytest.mark.parametrize("secret", ["configured", "unset"])
def test_two_workers_on_redis_share_history(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer, secret: str
) -> None:
    conversation = f"workers-{uuid.uuid4().hex[:8]}"
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", redis_server.url]
    env = {"REASONING_PROXY_SECRET": ""} if secret == "unset" else None
    with ProxyProcess([*args, "--workers", "2"], log=tmp_path / "workers.log", env=env) as proxy:
        # every call opens a new connection, so the workers take turns as they accept
        store_tool_call_turn(proxy.base, upstream, conversation)
        assert_reinjected(replay_without_reasoning(proxy.base, upstream, conversation))
        for _ in range(4):
            assert len(stored_turns(proxy.base, conversation).json()["turns"]) == 2


def test_two_workers_with_the_memory_store_are_refused_at_start(upstream: FakeUpstream) -> None:
    port = str(free_port())
    command = serve_command("--upstream", upstream.url, "--workers", "2", "--port", port)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "--workers 2 needs a shared store" in done.stderr
    assert "redis://" in done.stderr
    assert "listening" not in done.stdout


def _answer(*pieces: str) -> Stream:
    words = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    return Stream(
        [
            {"choices": [{"index": 0, "delta": {"reasoning_content": "Mid-stream thought."}}]},
            *words,
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ],
        delay=0.05,  # time enough to kill Redis after the first event
    )


def test_redis_dying_mid_stream_never_breaks_the_stream(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    # this Redis keeps an append-only file, so what it had survives its death
    redis = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    redis.start()
    headers = {"Authorization": "Bearer sk-mid", "X-Conversation-Id": "mid-stream"}
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    config = route_config(upstream, top={"store": {"url": redis.url}})
    try:
        with running_proxy(config) as proxy, httpx.Client(base_url=proxy.base, timeout=30) as http:
            upstream.script(_answer("kept ", "before"))
            assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200

            upstream.script(_answer("streamed ", "while ", "Redis ", "died"))
            lines: list[str] = []
            with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                for line in r.iter_lines():
                    if line.startswith("data:") and not lines:
                        redis.kill()
                    if line:
                        lines.append(line)
            assert lines[-1] == "data: [DONE]"
            assert not any('"error"' in line for line in lines)
            assert "died" in "".join(lines)

            wait_until(lambda: proxy.runtime.health.failures > 0, what="the failed append")
            assert proxy.runtime.health.ok is False
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["store"] == "down"
            assert http.get("/v1/conversations/mid-stream", headers=headers).status_code == 503

            redis.start()  # same port; replays its append-only file
            upstream.script(_answer("kept ", "after"))
            assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
            turns = http.get("/v1/conversations/mid-stream", headers=headers).json()["turns"]
            assert [t["content"] for t in turns] == ["kept before", "kept after"]
            assert proxy.runtime.health.ok is True
            assert http.get("/readyz").status_code == 200
    finally:
        redis.stop()


def test_a_stalled_redis_never_stores_a_turn_twice(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Regression: a Redis which stalled for between one and two
    seconds (a fork for a snapshot, a stuck disk) got one request's turn
    twice: the append's reply timed out after a second, the client sent
    the script again, and the server, awake, ran both. A command that timed
    out may have run, so it is not sent again: the turn is reported as not
    persisted (the store did not answer in time) and is there once."""
    redis = RedisServer(tmp_path / "redis").start()
    conversation = f"stall-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": "Bearer sk-stall", "X-Conversation-Id": conversation}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    config = route_config(upstream, top={"store": {"url": redis.url}})
    try:
        with running_proxy(config) as proxy, httpx.Client(base_url=proxy.base, timeout=30) as http:
            upstream.script(_answer("before"))
            assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200

            # the next append is sent to a stalled server, which wakes after
            # the first reply timed out (1 s) and before a second one would (2 s)
            upstream.script(_answer("during"))
            redis.pause()
            waking = threading.Timer(1.6, redis.resume)
            waking.start()
            try:
                answered = http.post("/v1/chat/completions", json=body, headers=headers)
            finally:
                waking.join()
            assert answered.status_code == 200

            upstream.script(_answer("after"))
            assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
            stored = http.get(f"/v1/conversations/{conversation}", headers=headers)
            assert [t["content"] for t in stored.json()["turns"]] == ["before", "during", "after"]
    finally:
        redis.stop()


def test_has_more_counts_past_conversations_expired_under_the_listing(
    upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """Regression: the Redis listing dropped recency entries whose
    conversation had expired after it ranged them, and returned fewer than
    there were, so `has_more` said False with older conversations left."""
    run = uuid.uuid4().hex[:8]
    key = {"Authorization": f"Bearer sk-listing-{run}"}
    names = [f"list-{run}-{n}" for n in range(4)]
    config = route_config(upstream, top={"store": {"url": redis_server.url}})
    with running_proxy(config) as proxy, redis.Redis.from_url(redis_server.url) as raw:
        for n, name in enumerate(names):
            answer = {"role": "assistant", "content": f"answer {n}"}
            upstream.script(Json({"choices": [{"message": answer, "finish_reason": "stop"}]}))
            user = {"role": "user", "content": f"question {n}"}
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                json={"model": "m", "messages": [user]},
                headers={**key, "X-Conversation-Id": name},
                timeout=30,
            )
            assert r.status_code == 200
        # the two newest expire now; their recency entries wait for a sweep
        for name in names[2:]:
            for found in raw.scan_iter(match=f"rp:{{*:{name}}}:*"):
                if not found.endswith(b":refs"):
                    raw.pexpire(found, 1)
        wait_until(lambda: not any(raw.scan_iter(match=f"rp:{{*:{names[3]}}}:conv")))
        one = httpx.get(f"{proxy.url}/conversations?limit=1", headers=key).json()
        two = httpx.get(f"{proxy.url}/conversations?limit=2", headers=key).json()
    assert [c["id"] for c in one["data"]] == [names[1]]
    assert one["has_more"] is True
    assert [c["id"] for c in two["data"]] == [names[1], names[0]]
    assert two["has_more"] is False


def test_a_replica_started_before_redis_takes_the_kept_secret_once_redis_answers(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """Without REASONING_PROXY_SECRET, a replica that starts while Redis is
    down is not ready (its keys are not yet the fleet's tenants); once Redis
    answers it takes the secret Redis keeps, and a turn stored through
    another replica is found through it."""
    server = RedisServer(tmp_path / "redis")
    conversation = f"late-{uuid.uuid4().hex[:8]}"
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", server.url]
    env = {"REASONING_PROXY_SECRET": ""}
    try:
        with ProxyProcess(args, log=tmp_path / "early.log", env=env) as early:
            ready = httpx.get(early.base + "/readyz", timeout=10)
            assert ready.status_code == 503
            assert ready.json()["secret"] == "pending"
            server.start()
            with ProxyProcess(args, log=tmp_path / "other.log", env=env) as other:
                wait_until(
                    lambda: httpx.get(early.base + "/readyz", timeout=10).status_code == 200,
                    what="the early replica to take the secret",
                )
                store_tool_call_turn(other.base, upstream, conversation)
                assert_reinjected(replay_without_reasoning(early.base, upstream, conversation))
        log = (tmp_path / "early.log").read_text()
        assert log.count("did not give its tenant secret") == 1
        assert "using the tenant secret kept in the redis store" in log
        assert "Traceback" not in log
    finally:
        server.stop()
