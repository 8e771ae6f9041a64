"""Metrics after a scripted session, and the canary: a unique key used as the
client's key and as a configured upstream key never shows up in logs, error
bodies, response headers, metrics or stored data, on any store backend."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.casefiles import chunk
from tests.e2e.test_messages_native import anthropic_stream
from tests.harness import FakeUpstream, Json, Stream, running_proxy
from tests.metrics_samples import scrape
from tests.stores.servers import ProxyProcess, RedisServer, store_url, wait_until
from tests.test_responses_native import upstream_stream


def value(metrics: dict[Any, float], name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


CALL = {
    "index": 0,
    "id": "call_9",
    "type": "function",
    "function": {"name": "lookup", "arguments": "{}"},
}


def test_counters_move_by_the_right_amount(upstream: FakeUpstream, refusing_port: int) -> None:
    dead = f"http://127.0.0.1:{refusing_port}/v1"
    config = {
        "routes": [
            {"name": "kimi", "models": ["kimi-*"], "upstream": upstream.url, "dialect": "kimi"},
            {"name": "dead", "models": ["dead-*"], "upstream": dead},
            {"name": "main", "models": ["*"], "upstream": upstream.url},
        ]
    }
    key = {"Authorization": "Bearer sk-metrics"}
    with running_proxy(config) as proxy:
        before = scrape(proxy.base)

        def post(model: str, stream: bool, messages: list[Any], **headers: str) -> int:
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                timeout=30,
                headers={**key, **headers},
                json={"model": model, "stream": stream, "messages": messages},
            )
            return r.status_code

        user = [{"role": "user", "content": "q"}]
        upstream.script(
            Stream([chunk({"reasoning_content": "native"}), chunk({"content": "a"}, "stop")])
        )
        assert post("m", True, user) == 200
        upstream.script(Stream([chunk({"content": "<think>tagged</think>b"}), chunk({}, "stop")]))
        assert post("m", True, user) == 200
        upstream.script(
            Stream(
                [
                    chunk({"reasoning_content": "plan"}),
                    chunk({"tool_calls": [CALL]}),
                    chunk({}, "tool_calls"),
                ]
            )
        )
        assert post("kimi-k2", True, user, **{"X-Conversation-Id": "mk"}) == 200
        history = [
            *user,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{k: v for k, v in CALL.items() if k != "index"}],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "ok"},
        ]
        assert (
            post(
                "kimi-k2",
                False,
                history,
                **{"X-Conversation-Id": "mk", "X-Reasoning-Include-In-Context": "true"},
            )
            == 200
        )
        upstream.script(Json({"error": {"message": "boom"}}, status=500))
        assert post("m", False, user) == 500
        assert post("dead-1", False, user) == 502
        assert post("m", False, user, **{"X-Reasoning-Effort": "bad"}) == 400

        def answered(metrics: dict[Any, float]) -> float:
            return sum(v for (n, _), v in metrics.items() if n == "reasoning_proxy_requests_total")

        # a request is counted just after its last byte: wait until all 7 are
        wait_until(lambda: answered(scrape(proxy.base)) - answered(before) >= 7, what="counts")
        after = scrape(proxy.base)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert (
        moved(
            "reasoning_proxy_requests_total",
            route="main",
            endpoint="chat.completions",
            status="200",
        )
        == 2
    )
    assert (
        moved(
            "reasoning_proxy_requests_total",
            route="kimi",
            endpoint="chat.completions",
            status="200",
        )
        == 2
    )
    assert (
        moved(
            "reasoning_proxy_requests_total",
            route="main",
            endpoint="chat.completions",
            status="500",
        )
        == 1
    )
    assert (
        moved(
            "reasoning_proxy_requests_total",
            route="dead",
            endpoint="chat.completions",
            status="502",
        )
        == 1
    )
    assert (
        moved(
            "reasoning_proxy_requests_total", route="-", endpoint="chat.completions", status="400"
        )
        == 1
    )
    assert moved("reasoning_proxy_streams_total", route="main", outcome="complete") == 2
    assert moved("reasoning_proxy_streams_total", route="kimi", outcome="complete") == 1
    assert moved("reasoning_proxy_reasoning_blocks_total", source="reasoning_content") == 2
    assert moved("reasoning_proxy_reasoning_blocks_total", source="think_tag") == 1
    assert moved("reasoning_proxy_delimiters_stripped_total") == 2
    assert moved("reasoning_proxy_turns_reinjected_total", dialect="kimi") == 1
    assert moved("reasoning_proxy_upstream_errors_total", route="main", kind="status") == 1
    assert moved("reasoning_proxy_upstream_errors_total", route="dead", kind="connect") == 1
    assert moved("reasoning_proxy_store_operations_total", op="append", result="ok") == 4
    assert moved("reasoning_proxy_added_latency_seconds_count") == 5
    assert value(after, "reasoning_proxy_store_conversations") >= 2
    assert value(after, "reasoning_proxy_store_up") == 1


def _events(blob: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in blob.split(b"\n\n") if e]


def test_a_stream_cut_short_is_an_upstream_error_on_every_door(upstream: FakeUpstream) -> None:
    """Chat Completions, a Responses upstream and a Messages upstream: a stream
    the upstream cuts mid-way, or ends before its end event, counts as a
    `disconnected` upstream error and a failed stream, on its own route,
    whichever door relays it."""
    routes = [
        {"name": "chat", "models": ["c"], "upstream": upstream.url},
        {"name": "resp", "models": ["r"], "upstream": upstream.url, "api": "responses"},
        {"name": "msgs", "models": ["m"], "upstream": upstream.url, "api": "messages"},
    ]
    user = [{"role": "user", "content": "hi"}]
    upstream.script(
        Stream([chunk({"reasoning_content": "a"}), chunk({"content": "b"})] * 3, cut_after=3),
        Stream(_events(upstream_stream(["one ", "two ", "three"])), done=False, cut_after=4),
        Stream(anthropic_stream().chunks, done=False, cut_after=4),
        # a clean end of the body, but before the stream's own end event
        Stream(anthropic_stream().chunks[:4], done=False),
    )
    with running_proxy({"routes": routes}) as proxy:
        before = scrape(proxy.base)
        auth = {"Authorization": "Bearer sk-cut"}
        doors = ("chat/completions", "c"), ("responses", "r"), ("messages", "m"), ("messages", "m")
        for path, model in doors:
            body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": 5}
            body["input" if path == "responses" else "messages"] = user
            r = httpx.post(f"{proxy.url}/{path}", json=body, headers=auth, timeout=30)
            assert r.status_code == 200, r.text

        def failed(metrics: dict[Any, float]) -> float:
            return sum(
                v
                for (n, labels), v in metrics.items()
                if n == "reasoning_proxy_streams_total" and ("outcome", "failed") in labels
            )

        wait_until(lambda: failed(scrape(proxy.base)) - failed(before) >= 4, what="counts")
        after = scrape(proxy.base)
    for route, times in (("chat", 1), ("resp", 1), ("msgs", 2)):
        name = "reasoning_proxy_upstream_errors_total"
        moved = value(after, name, route=route, kind="disconnected")
        assert moved - value(before, name, route=route, kind="disconnected") == times, route
        name = "reasoning_proxy_streams_total"
        moved = value(after, name, route=route, outcome="failed")
        assert moved - value(before, name, route=route, outcome="failed") == times, route


# -- the canary ------------------------------------------------------------------------


def _config(directory: Path, route_a: FakeUpstream, route_b: FakeUpstream) -> Path:
    path = directory / "canary.yaml"
    path.write_text(
        "server:\n  admin_token: ${ADMIN_TOKEN}\n"
        "routes:\n"
        f"  - name: a\n    models: ['a-*']\n    upstream: {route_a.url}\n"
        "    api_key: ${ROUTE_A_KEY}\n    dialect: kimi\n"
        f"  - name: b\n    models: ['*']\n    upstream: {route_b.url}\n"
        "    timeouts: {idle: 0.5}\n"
    )
    return path


def _exercise(
    proxy: ProxyProcess, client_key: str, a: FakeUpstream, b: FakeUpstream
) -> list[httpx.Response]:
    """Every endpoint and error path once; returns every response."""
    auth = {"Authorization": f"Bearer {client_key}"}
    out: list[httpx.Response] = []
    user = [{"role": "user", "content": "hello"}]

    def chat(model: str, stream: bool, messages: list[Any], **headers: str) -> None:
        out.append(
            httpx.post(
                f"{proxy.url}/chat/completions",
                timeout=30,
                headers={**auth, **headers},
                json={"model": model, "stream": stream, "messages": messages},
            )
        )

    a.script(
        Stream(
            [
                chunk({"reasoning_content": "plan"}),
                chunk({"tool_calls": [CALL]}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    chat("a-1", True, user, **{"X-Conversation-Id": "canary-1"})
    history = [
        *user,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{k: v for k, v in CALL.items() if k != "index"}],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "ok"},
    ]
    chat(
        "a-1",
        False,
        history,
        **{"X-Conversation-Id": "canary-1", "X-Reasoning-Include-In-Context": "true"},
    )
    b.script(Stream([chunk({"content": "<think>t</think>visible"}), chunk({}, "stop")]))
    chat("b-1", True, user)
    b.script(
        Json(
            {"error": {"message": "upstream says no", "type": "invalid_request_error"}}, status=401
        )
    )
    chat("b-1", False, user)
    b.script(Stream([chunk({"content": "x"})], hang_after=1))
    chat("b-1", True, user)  # idle timeout mid-stream
    chat("b-1", True, user, **{"X-Reasoning-Effort": "sk-canary-in-a-header"})
    chat("b-1", True, user, **{"X-Reasoning-Profile": "missing"})
    chat("b-1", True, user, **{"X-Conversation-Id": "bad id"})
    out.append(httpx.post(f"{proxy.url}/chat/completions", headers=auth, content=b"{oops"))
    out.append(httpx.get(f"{proxy.url}/models", headers=auth))
    out.append(httpx.get(f"{proxy.url}/conversations/canary-1", headers=auth))
    out.append(httpx.get(f"{proxy.url}/conversations", headers=auth))
    out.append(httpx.get(f"{proxy.url}/conversations/unknown", headers=auth))
    out.append(httpx.put(f"{proxy.url}/reasoning/profiles/p", headers=auth, json={"effort": "x"}))
    out.append(httpx.get(f"{proxy.url}/reasoning/profiles", headers=auth))
    out.append(httpx.get(f"{proxy.base}/readyz"))
    out.append(httpx.get(f"{proxy.base}/metrics"))
    return out


def _redis_dump(url: str) -> bytes:
    client = redis.Redis.from_url(url)
    parts = []
    try:
        for key in client.scan_iter("*"):
            parts.append(key)
            kind = client.type(key)
            if kind == b"string":
                parts.append(client.get(key) or b"")
            elif kind == b"list":
                parts += client.lrange(key, 0, -1)
            elif kind == b"hash":
                for k, v in client.hgetall(key).items():
                    parts += [k, v]
            elif kind == b"zset":
                parts += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
    finally:
        client.close()
    return b"\n".join(parts)


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_the_canary_key_never_leaks(store: str, tmp_path: Path, redis_server: RedisServer) -> None:
    canary = uuid.uuid4().hex
    client_key = f"sk-canary-client-{canary}"
    key_a = f"sk-canary-route-{canary}"
    admin = f"admin-canary-{canary}"
    a, b = FakeUpstream().start(), FakeUpstream().start()
    url = store_url(store, tmp_path, redis_server)
    log = tmp_path / "proxy.log"
    try:
        config = _config(tmp_path, a, b)
        with ProxyProcess(
            ["--config", str(config), "--store", url, "--log-level", "debug", "--log-bodies"],
            log=log,
            env={"ROUTE_A_KEY": key_a, "ADMIN_TOKEN": admin},
        ) as proxy:
            responses = _exercise(proxy, client_key, a, b)
        seen_by_a = b"".join(r.body + json.dumps(dict(r.headers)).encode() for r in a.requests)
        seen_by_b = b"".join(r.body + json.dumps(dict(r.headers)).encode() for r in b.requests)
    finally:
        a.stop()
        b.stop()
    assert [r.status_code for r in responses][:9] == [200, 200, 200, 401, 200, 400, 400, 400, 400]
    # the routes' upstreams got what was theirs, and nothing else
    assert key_a.encode() in seen_by_a
    assert client_key.encode() not in seen_by_a
    assert client_key.encode() in seen_by_b
    assert key_a.encode() not in seen_by_b
    haystacks = {
        "logs": log.read_bytes(),
        "bodies": b"".join(r.content for r in responses),
        "headers": json.dumps([dict(r.headers) for r in responses]).encode(),
    }
    if store == "sqlite":
        haystacks["store"] = b"".join(p.read_bytes() for p in tmp_path.glob("canary.db*"))
    elif store == "redis":
        haystacks["store"] = _redis_dump(redis_server.url)
    assert b"chat.completions" in haystacks["logs"]  # debug logs and bodies were written
    assert b'"body"' in haystacks["logs"] or b"body=" in haystacks["logs"]
    for where, data in haystacks.items():
        for secret in (canary, admin):
            assert secret.encode() not in data, f"{secret} found in {where}"
