"""The proxy server end to end: streaming without buffering, disconnects,
upstream errors and timeouts, the settings headers, routing and security."""

from __future__ import annotations

import itertools
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trustme

from tests.casefiles import chunk, read_stream
from tests.harness import FakeUpstream, Hang, Json, Stream, route_config, running_proxy

KEY = {"Authorization": "Bearer sk-test"}


def body(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


# -- streaming -------------------------------------------------------------------


def test_events_are_forwarded_as_they_arrive(upstream: FakeUpstream) -> None:
    parts = ["<think>one", " two</think>", "Answer", " part", " three"]
    upstream.script(Stream([chunk({"content": p}) for p in parts] + [chunk({}, "stop")], delay=0.2))
    arrivals: list[tuple[float, bytes]] = []
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        start = time.monotonic()
        with client.stream("POST", f"{proxy.url}/chat/completions", json=body(), headers=KEY) as r:
            assert r.headers["x-accel-buffering"] == "no"
            assert r.headers["content-type"].startswith("text/event-stream")
            assert "content-encoding" not in r.headers
            for raw in r.iter_raw():
                arrivals.append((time.monotonic() - start, raw))
    events = [(t, e) for t, raw in arrivals for e in raw.split(b"\n\n") if e.startswith(b"data:")]
    assert len(events) == 7  # 6 upstream events (one carries 'one two' split) + [DONE]
    times = [t for t, _ in events]
    # the upstream sends one event every 200 ms: each must arrive on its own,
    # soon after it was sent, never held back for the next one
    for n, t in enumerate(times[:6]):
        assert t >= 0.2 * (n + 1) - 0.05, (n, times)
        assert t < 0.2 * (n + 1) + 0.15, (n, times)
    gaps = [b - a for a, b in itertools.pairwise(times[:5])]
    assert all(g > 0.1 for g in gaps), times


def test_client_disconnect_closes_the_upstream_request(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": f"part {i} "}) for i in range(100)], delay=0.2))
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{proxy.url}/chat/completions", json=body(), headers=KEY) as r:
            for raw in r.iter_raw():
                if b"part 1" in raw:
                    break
        dropped = time.monotonic()
        assert upstream.disconnected.wait(5)
        assert time.monotonic() - dropped < 1.5
        # the cut turn is stored, marked incomplete
        conversation = r.headers["x-conversation-id"]
        stored = client.get(f"{proxy.url}/conversations/{conversation}", headers=KEY).json()
        assert stored["turns"][0]["complete"] is False
        assert stored["turns"][0]["content"].startswith("part 0 part 1")


def test_failure_after_the_first_byte_ends_with_an_error_event(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": f"x{i}"}) for i in range(5)], cut_after=3))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
    client = read_stream(r.content)
    assert r.status_code == 200
    assert client["content"] == "x0x1x2"
    assert not client["done"]
    assert client["errors"][0]["code"] in ("upstream_closed", "upstream_disconnected")
    assert set(client["errors"][0]) == {"message", "type", "param", "code"}


def test_idle_timeout_mid_stream_is_an_error_event(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": "a"}), chunk({"content": "b"})], hang_after=1))
    config = route_config(upstream, timeouts={"idle": 0.5})
    with running_proxy(config) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
    client = read_stream(r.content)
    assert client["content"] == "a"
    assert client["errors"][0]["code"] == "upstream_timeout"
    assert client["errors"][0]["type"] == "timeout_error"
    assert not client["done"]


def test_idle_timeout_before_the_response_is_504(upstream: FakeUpstream) -> None:
    upstream.script(Hang())
    with running_proxy(route_config(upstream, timeouts={"idle": 0.5})) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(False), headers=KEY, timeout=30)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"


def test_slow_but_steady_stream_is_not_cut_by_the_idle_timeout(upstream: FakeUpstream) -> None:
    # total time 1.6 s, idle timeout 0.5 s: the timeout is between reads, not a cap
    upstream.script(
        Stream([chunk({"content": "z"}) for _ in range(8)] + [chunk({}, "stop")], delay=0.2)
    )
    with running_proxy(route_config(upstream, timeouts={"idle": 0.5})) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
    client = read_stream(r.content)
    assert client["content"] == "z" * 8
    assert client["done"]


# -- upstream errors ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_upstream_error_before_the_stream_keeps_status_body_and_retry_after(
    upstream: FakeUpstream, stream: bool
) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": None}}
    upstream.script(Json(error, status=429, headers={"Retry-After": "7", "X-Request-Id": "r1"}))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(stream), headers=KEY, timeout=30)
    assert r.status_code == 429
    assert r.json() == error
    assert r.headers["retry-after"] == "7"
    assert r.headers["x-request-id"] == "r1"


def test_connect_failure_is_502(refusing_port: int) -> None:
    dead = f"http://127.0.0.1:{refusing_port}/v1"
    config = {"routes": [{"name": "dead", "upstream": dead}]}
    with running_proxy(config) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert error["type"] == "upstream_error"


def test_redirects_are_not_followed(upstream: FakeUpstream) -> None:
    upstream.script(Json({}, status=307, headers={"Location": "http://169.254.169.254/"}))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(False), headers=KEY, timeout=30)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_redirect"
    assert "location" not in r.headers
    assert len(upstream.requests) == 1


def test_upstream_json_answer_to_a_stream_request_is_normalized(upstream: FakeUpstream) -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "<think>r</think>ans"},
                "finish_reason": "stop",
            }
        ],
    }
    upstream.script(Json(completion))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
    # the client asked for a stream: it gets one (see test_reliability for every door)
    assert r.headers["content-type"].startswith("text/event-stream")
    streamed = read_stream(r.content)
    assert streamed["content"] == "ans"
    assert streamed["reasoning"] == "r"
    assert streamed["done"] is True


# -- settings headers ----------------------------------------------------------------

INVALID = [
    ("X-Reasoning-Enabled", "yes", "true, false"),
    ("X-Reasoning-Include-In-Context", "1", "true, false"),
    ("X-Reasoning-Include-In-Response", "", "true, false"),
    ("X-Reasoning-Effort", "extreme", "minimal, low, medium, high"),
    ("X-Reasoning-Max-Tokens", "0", "positive integer"),
    ("X-Reasoning-Max-Tokens", "-5", "positive integer"),
    ("X-Reasoning-Max-Tokens", "1.5", "positive integer"),
    ("X-Reasoning-Max-Tokens", "ten", "positive integer"),
    ("X-Reasoning-Max-Tokens", "1000000000", "up to 999,999,999"),
    ("X-Reasoning-Format", "xml", "field, native"),
    ("X-Reasoning-Strip-From-Context", "some", "all, allButLast, none"),
]


@pytest.mark.parametrize(("name", "value", "allowed"), INVALID)
def test_invalid_setting_is_400_and_nothing_goes_upstream(
    upstream: FakeUpstream, name: str, value: str, allowed: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        for stream in (True, False):
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                json=body(stream),
                headers={**KEY, name: value},
                timeout=30,
            )
            assert r.status_code == 400
            assert r.json() == {
                "error": {
                    "message": r.json()["error"]["message"],
                    "type": "invalid_request_error",
                    "param": name,
                    "code": "invalid_reasoning_setting",
                }
            }
            message = r.json()["error"]["message"]
            assert name in message
            assert allowed in message
            if value:
                assert value not in message.replace(name, "")
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("headers", "code", "param"),
    [
        ({"X-Reasoning-Profile": "nope"}, "unknown_profile", "X-Reasoning-Profile"),
        ({"X-Conversation-Id": "has space"}, "invalid_conversation_id", "X-Conversation-Id"),
        ({"X-Conversation-Id": "x" * 129}, "invalid_conversation_id", "X-Conversation-Id"),
        ({"X-Conversation-Id": "semi;colon"}, "invalid_conversation_id", "X-Conversation-Id"),
    ],
)
def test_profile_and_conversation_errors(
    upstream: FakeUpstream, headers: dict[str, str], code: str, param: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions", json=body(), headers={**KEY, **headers}, timeout=30
        )
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert next(iter(headers.values())) not in error["message"]
    assert upstream.requests == []


def test_header_values_are_case_insensitive(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="openrouter")) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json=body(False),
            headers={
                **KEY,
                "X-Reasoning-Effort": "HIGH",
                "X-Reasoning-Strip-From-Context": "ALLBUTLAST",
                "X-Reasoning-Enabled": "True",
            },
            timeout=30,
        )
    assert r.status_code == 200
    assert upstream.chat_requests()[0].json["reasoning"] == {"effort": "high"}


def test_precedence_defaults_route_profile_headers(upstream: FakeUpstream) -> None:
    config = route_config(
        upstream,
        dialect="openrouter",
        reasoning={"effort": "low", "max_tokens": 100},
        top={
            "defaults": {"effort": "minimal"},
            "profiles": {"deep": {"effort": "medium"}, "budget": {"effort": None}},
        },
    )
    sent = []
    with running_proxy(config) as proxy:
        for headers in (
            {},
            {"X-Reasoning-Profile": "deep"},
            {"X-Reasoning-Profile": "deep", "X-Reasoning-Effort": "high"},
            {"X-Reasoning-Profile": "budget"},
            {"X-Reasoning-Max-Tokens": "2048", "X-Reasoning-Profile": "budget"},
        ):
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                json=body(False),
                headers={**KEY, **headers},
                timeout=30,
            )
            assert r.status_code == 200
            sent.append(upstream.chat_requests()[-1].json.get("reasoning"))
    assert sent == [
        {"effort": "low"},  # route beats defaults
        {"effort": "medium"},  # profile beats route
        {"effort": "high"},  # header beats profile
        {"max_tokens": 100},  # the profile unset effort: the route's budget applies
        {"max_tokens": 2048},
    ]


def test_client_body_reasoning_params_pass_unless_a_header_overrides(
    upstream: FakeUpstream,
) -> None:
    with running_proxy(route_config(upstream, reasoning={"effort": "low"})) as proxy:
        httpx.post(
            f"{proxy.url}/chat/completions",
            json=body(False, reasoning_effort="high"),
            headers=KEY,
            timeout=30,
        )
        httpx.post(
            f"{proxy.url}/chat/completions",
            json=body(False, reasoning_effort="high"),
            headers={**KEY, "X-Reasoning-Effort": "minimal"},
            timeout=30,
        )
    first, second = upstream.chat_requests()
    assert first.json["reasoning_effort"] == "high"
    assert second.json["reasoning_effort"] == "minimal"


def test_include_in_response_false_hides_reasoning_but_stores_it(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream([chunk({"reasoning_content": "secret plan"}), chunk({"content": "answer"}, "stop")])
    )
    with running_proxy(route_config(upstream)) as proxy:
        headers = {**KEY, "X-Reasoning-Include-In-Response": "false", "X-Conversation-Id": "h1"}
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=headers, timeout=30)
        assert b"secret plan" not in r.content
        assert read_stream(r.content)["content"] == "answer"
        stored = httpx.get(f"{proxy.url}/conversations/h1", headers=KEY).json()
    (block,) = stored["turns"][0]["blocks"]
    assert block["thought"] == "secret plan"
    assert block["isHidden"] is True


# -- routing and security ----------------------------------------------------------------


def test_routes_by_model_glob_and_unknown_model_is_404(upstream: FakeUpstream) -> None:
    config = {"routes": [{"name": "ds", "models": ["deepseek-*"], "upstream": upstream.url}]}
    with running_proxy(config) as proxy:
        ok = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=KEY,
            timeout=30,
            json={**body(False), "model": "DeepSeek-Reasoner"},
        )
        missing = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=KEY,
            timeout=30,
            json={**body(False), "model": "gpt-4o"},
        )
    assert ok.status_code == 200
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert missing.json()["error"]["param"] == "model"
    assert len(upstream.requests) == 1


def test_nothing_in_the_request_changes_the_upstream(upstream: FakeUpstream) -> None:
    elsewhere = FakeUpstream().start()
    try:
        with running_proxy(route_config(upstream)) as proxy:
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                json=body(False, api_base=elsewhere.url, base_url=elsewhere.url),
                headers={
                    **KEY,
                    "Host": f"127.0.0.1:{elsewhere.port}",
                    "X-Forwarded-Host": f"127.0.0.1:{elsewhere.port}",
                },
                timeout=30,
            )
        assert r.status_code == 200
        assert len(upstream.requests) == 1
        assert elsewhere.requests == []
    finally:
        elsewhere.stop()


def test_route_key_replaces_the_client_key_and_never_leaks(upstream: FakeUpstream) -> None:
    other = FakeUpstream().start()
    config = {
        "routes": [
            {"name": "a", "models": ["a-*"], "upstream": upstream.url, "api_key": "${ROUTE_KEY}"},
            {"name": "b", "models": ["*"], "upstream": other.url},
        ]
    }
    try:
        with running_proxy(config, env={"ROUTE_KEY": "sk-route-a-secret"}) as proxy:
            httpx.post(
                f"{proxy.url}/chat/completions",
                json={**body(False), "model": "a-1"},
                headers={"Authorization": "Bearer sk-client"},
                timeout=30,
            )
            httpx.post(
                f"{proxy.url}/chat/completions",
                json={**body(False), "model": "b-1"},
                headers={"Authorization": "Bearer sk-client"},
                timeout=30,
            )
            bad = httpx.post(
                f"{proxy.url}/chat/completions",
                content=b"{nope",
                headers={"Authorization": "Bearer sk-client"},
                timeout=30,
            )
        assert upstream.requests[0].headers["Authorization"] == "Bearer sk-route-a-secret"
        assert other.requests[0].headers["Authorization"] == "Bearer sk-client"
        assert "sk-route-a-secret" not in str(other.requests[0].headers)
        assert "sk-" not in bad.text
    finally:
        other.stop()


def test_proxy_headers_are_not_sent_upstream(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        httpx.post(
            f"{proxy.url}/chat/completions",
            json=body(False),
            headers={
                **KEY,
                "X-Reasoning-Effort": "low",
                "X-Conversation-Id": "c-1",
                "X-Custom": "kept",
            },
            timeout=30,
        )
    sent = {k.lower() for k in upstream.requests[0].headers}
    assert "x-reasoning-effort" not in sent
    assert "x-conversation-id" not in sent
    assert "x-custom" in sent


def test_body_too_large_is_413(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, top={"limits": {"max_body_bytes": 2048}})) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=KEY,
            timeout=30,
            json=body(False, padding="x" * 5000),
        )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert upstream.requests == []


HI = b'"messages": [{"role": "user", "content": "hi"}]'


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b"{not json", "invalid_json", None),
        (b"[1, 2]", "invalid_json", None),
        (b'{"model": "m"}', "invalid_messages", "messages"),
        (b'{"model": "m", "messages": "hi"}', "invalid_messages", "messages"),
        (b'{"model": 5, ' + HI + b"}", "invalid_request", "model"),
        (b'{"model": "m", "stream": "yes", ' + HI + b"}", "invalid_request", "stream"),
    ],
)
def test_bad_bodies_are_400(
    upstream: FakeUpstream, raw: bytes, code: str, param: str | None
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", content=raw, headers=KEY, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["param"] == param
    assert upstream.requests == []


def test_a_null_stream_is_no_stream(upstream: FakeUpstream) -> None:
    """OpenAI's `stream` is nullable: null is the default, not a type error."""
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json={**body(False), "stream": None},
            headers=KEY,
            timeout=30,
        )
    assert r.status_code == 200
    assert r.json()["object"] == "chat.completion"


def test_nul_in_a_header_value_is_400(upstream: FakeUpstream) -> None:
    # httpx refuses to send such a header, so write the request by hand
    with running_proxy(route_config(upstream)) as proxy:
        payload = orjson.dumps(body(False))
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"X-Reasoning-Effort: lo\x00w\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + payload
        )
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while chunk_ := sock.recv(65536):
                data += chunk_
    assert data.startswith(b"HTTP/1.1 400")
    assert upstream.requests == []


def test_require_auth(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, top={"server": {"require_auth": True}})) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(False), timeout=30)
        models = httpx.get(f"{proxy.url}/models", timeout=30)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert models.status_code == 401
    assert upstream.requests == []


@pytest.mark.parametrize("authorization", ["Bearer", "", "Basic", "token"])
def test_require_auth_refuses_an_empty_key(upstream: FakeUpstream, authorization: str) -> None:
    """An Authorization header without a token is no key: it does not open
    the shared anonymous tenant of a proxy that requires keys."""
    auth = {"Authorization": authorization}
    with running_proxy(route_config(upstream, top={"server": {"require_auth": True}})) as proxy:
        chat = httpx.post(f"{proxy.url}/chat/completions", json=body(False), headers=auth)
        listed = httpx.get(f"{proxy.url}/conversations", headers=auth)
        keyed = httpx.get(f"{proxy.url}/conversations", headers={"x-api-key": "sk-x-only"})
    assert (chat.status_code, listed.status_code) == (401, 401)
    assert chat.json()["error"]["type"] == "authentication_error"
    assert keyed.status_code == 200  # x-api-key is a key like any other
    assert upstream.requests == []


def test_x_api_key_names_the_same_tenant_as_authorization(upstream: FakeUpstream) -> None:
    """One key is one tenant whichever header carries it, on every door: a
    conversation made with `x-api-key` is not the anonymous tenant's."""
    upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
    with running_proxy(route_config(upstream)) as proxy:
        made = httpx.post(
            f"{proxy.url}/chat/completions",
            json=body(False),
            headers={"x-api-key": "sk-dave-0001", "X-Conversation-Id": "dave-private"},
        )
        assert made.status_code == 200, made.text
        anonymous = httpx.get(f"{proxy.url}/conversations/dave-private")
        other = httpx.get(f"{proxy.url}/conversations/dave-private", headers=KEY)
        bearer = httpx.get(
            f"{proxy.url}/conversations/dave-private",
            headers={"Authorization": "Bearer sk-dave-0001"},
        )
    assert (anonymous.status_code, other.status_code, bearer.status_code) == (404, 404, 200)
    # without a route key the client's credential goes as it came
    assert upstream.requests[0].headers["x-api-key"] == "sk-dave-0001"
    assert "authorization" not in upstream.requests[0].headers


@pytest.mark.parametrize(
    "key",
    [
        {"api_key": "sk-route-key-1"},
        {"headers": {"Authorization": "Bearer sk-route-key-1"}},
    ],
    ids=["api_key", "headers"],
)
def test_a_keyed_route_gets_none_of_the_clients_credentials(
    upstream: FakeUpstream, key: dict[str, Any]
) -> None:
    """A route with its own key (`api_key`, or a credential in `headers:`):
    the client's Authorization, x-api-key, api-key and cookies stay home, on
    the chat door, the Responses door and pass-through alike; the route's key
    goes alone."""
    completion = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    upstream.script(Json(completion), Json(completion), Json({"data": []}))
    client = {
        "Authorization": "Bearer sk-client-a",
        "x-api-key": "sk-client-b",
        "api-key": "sk-client-c",
        "Cookie": "session=sk-client-d",
    }
    with running_proxy(route_config(upstream, **key)) as proxy:
        chat = httpx.post(f"{proxy.url}/chat/completions", json=body(False), headers=client)
        responses = httpx.post(
            f"{proxy.url}/responses", json={"model": "m", "input": "hi"}, headers=client
        )
        passed = httpx.post(
            f"{proxy.url}/embeddings", json={"model": "m", "input": "hi"}, headers=client
        )
    assert [r.status_code for r in (chat, responses, passed)] == [200, 200, 200]
    assert len(upstream.requests) == 3
    for request in upstream.requests:
        assert request.headers.getall("authorization") == ["Bearer sk-route-key-1"]
        for name in ("x-api-key", "api-key", "cookie"):
            assert name not in request.headers, (request.path, name)
        assert b"sk-client" not in repr(dict(request.headers)).encode()


def test_get_on_chat_completions_is_405(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.get(f"{proxy.url}/chat/completions", timeout=30)
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"


# -- pass-through and operations -------------------------------------------------------


def test_other_v1_paths_pass_through_unchanged(upstream: FakeUpstream) -> None:
    embedding = {"object": "list", "data": [{"embedding": [0.1, 0.2], "index": 0}]}
    upstream.script(Json(embedding, status=201, headers={"X-Upstream": "yes"}))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/embeddings?dims=2",
            headers={**KEY, "X-Trace": "t1"},
            json={"model": "e", "input": "hello"},
            timeout=30,
        )
        models = httpx.get(f"{proxy.url}/models", headers=KEY, timeout=30)
    assert r.status_code == 201
    assert r.json() == embedding
    assert r.headers["x-upstream"] == "yes"
    sent = upstream.requests[0]
    assert (sent.method, sent.path, sent.query) == ("POST", "/v1/embeddings", "dims=2")
    assert sent.json == {"model": "e", "input": "hello"}
    assert sent.headers["X-Trace"] == "t1"
    assert sent.headers["Authorization"] == "Bearer sk-test"
    assert models.json()["data"][0]["id"] == "fake-model"


def test_health_and_readiness(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        assert httpx.get(f"{proxy.base}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{proxy.base}/readyz")
        missing = httpx.get(f"{proxy.base}/nope")
    assert ready.status_code == 200
    assert ready.json()["store"] == "ok"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


# -- connections to the upstream ---------------------------------------------------


def test_upstream_connections_are_kept_alive_and_reused(upstream: FakeUpstream) -> None:
    # Sequential requests of every kind go over one pooled upstream connection:
    # streams read to [DONE], whole responses, and pass-through requests.
    answers: list[Any] = []
    for n in range(3):
        answers.append(Stream([chunk({"content": f"part {n}"}), chunk({}, "stop")]))
        answers.append(Json(_completion(n)))
        answers.append(Json({"object": "list", "data": []}))  # the /models request
    upstream.script(*answers)
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        for n in range(3):
            r = client.post(f"{proxy.url}/chat/completions", json=body(stream=True), headers=KEY)
            assert r.status_code == 200
            assert f"part {n}" in r.text
            r = client.post(f"{proxy.url}/chat/completions", json=body(stream=False), headers=KEY)
            assert r.json()["choices"][0]["message"]["content"] == f"answer {n}"
            assert client.get(f"{proxy.url}/models", headers=KEY).status_code == 200
    peers = {r.peer for r in upstream.requests}
    assert len(upstream.requests) == 9
    assert None not in peers
    assert len(peers) == 1, peers


def _completion(n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"answer {n}"},
                "finish_reason": "stop",
            }
        ],
    }


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_an_https_upstream(
    tls_ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    # The proxy verifies upstream certificates against the system's trust
    # store; SSL_CERT_FILE points it at the test CA, as an operator could.
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(server)
    if trusted:
        tls_ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    upstream = FakeUpstream(tls=server).start()
    try:
        upstream.script(Stream([chunk({"content": "<think>hm</think>Hi"}), chunk({}, "stop")]))
        with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
            assert proxy.config.routes[0].upstream.startswith("https://")
            r = client.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY)
        if trusted:
            assert r.status_code == 200
            stream = read_stream(r.content)
            assert (stream["content"], stream["reasoning"]) == ("Hi", "hm")
            assert len(upstream.chat_requests()) == 1
        else:
            assert r.status_code == 502
            assert r.json()["error"]["code"] == "upstream_tls_failure"
            assert upstream.chat_requests() == []
    finally:
        upstream.stop()


def test_the_root_says_what_answers_here(upstream: FakeUpstream) -> None:
    """Clients check `HEAD /` (Claude Code does): a 200 naming the server."""
    with running_proxy(route_config(upstream)) as proxy:
        head = httpx.head(proxy.base + "/")
        root = httpx.get(proxy.base + "/")
    assert head.status_code == 200
    assert head.content == b""
    assert root.json()["name"] == "reasoning-proxy"
    assert root.json()["api"] == "/v1"
    assert upstream.requests == []


def test_a_web_page_of_another_origin_cannot_spend_the_route_key(upstream: FakeUpstream) -> None:
    """A page on another site can make a browser POST a `text/plain` body to
    a proxy on localhost (no preflight for that): the proxy refuses any
    request whose Origin is not its own, before anything goes upstream. Its
    own page (the inspector) and clients that send no Origin are served;
    `server.allowed_origins` lets a named page in."""
    text_plain = {**KEY, "Content-Type": "text/plain"}
    raw = orjson.dumps(body(False))
    config = route_config(upstream, api_key="sk-route-key-csrf")
    with running_proxy(config) as proxy:
        own = proxy.base.removeprefix("http://")
        foreign = [
            httpx.post(
                f"{proxy.url}/chat/completions", content=raw, headers={**text_plain, "Origin": o}
            )
            for o in (
                "https://evil.example",
                "null",
                "http://127.0.0.2",
                f"http://{own}.evil.example",
            )
        ]
        listed = httpx.get(f"{proxy.url}/conversations", headers={"Origin": "https://evil.example"})
        assert upstream.requests == []
        upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
        # behind a reverse proxy that names the public host it was sent to
        upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
        behind = httpx.post(
            f"{proxy.url}/chat/completions",
            content=raw,
            headers={
                **text_plain,
                "Origin": "https://proxy.example",
                "X-Forwarded-Host": "proxy.example",
            },
        )
        same = httpx.post(
            f"{proxy.url}/chat/completions",
            content=raw,
            headers={**text_plain, "Origin": f"http://{own}"},
        )
    assert [r.status_code for r in foreign] == [403, 403, 403, 403]
    assert behind.status_code == 200
    assert foreign[0].json()["error"]["code"] == "forbidden_origin"
    assert listed.status_code == 403
    assert same.status_code == 200
    allowed = route_config(upstream, top={"server": {"allowed_origins": ["https://app.example"]}})
    with running_proxy(allowed) as proxy:
        upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
        named = httpx.post(
            f"{proxy.url}/chat/completions",
            content=raw,
            headers={**text_plain, "Origin": "https://app.example"},
        )
        other = httpx.post(
            f"{proxy.url}/chat/completions",
            content=raw,
            headers={**text_plain, "Origin": "https://b.example"},
        )
        asked = httpx.options(
            f"{proxy.url}/chat/completions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        refused = httpx.options(
            f"{proxy.url}/chat/completions",
            headers={"Origin": "https://b.example", "Access-Control-Request-Method": "POST"},
        )
    assert (named.status_code, other.status_code) == (200, 403)
    # an allowed page gets what CORS needs: it may ask first, and read the answer
    assert named.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-origin" not in other.headers
    assert asked.status_code == 204
    assert asked.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in asked.headers["access-control-allow-methods"]
    assert asked.headers["access-control-allow-headers"] == "authorization, content-type"
    assert refused.status_code == 403


@pytest.mark.parametrize(
    "route_key",
    [{"api_key": "sk-route-key-2"}, {"headers": {"X-Api-Key": "sk-route-key-2"}}],
    ids=["api_key", "headers x-api-key"],
)
def test_stored_chat_completions_behind_a_route_key_stay_with_their_maker(
    upstream: FakeUpstream, route_key: dict[str, Any]
) -> None:
    """OpenAI's stored completions (`store: true`) are read back by id through
    the pass-through; behind a route key (`api_key`, or one in `headers:`)
    the upstream sees one caller, so the proxy records who made each and
    serves its id to that tenant only."""
    alice = {"Authorization": "Bearer sk-alice-chat"}
    bob = {"Authorization": "Bearer sk-bob-chat"}
    stored = {
        "id": "chatcmpl-stored-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    }
    with running_proxy(route_config(upstream, **route_key)) as proxy:
        upstream.script(Json(stored))
        made = httpx.post(
            f"{proxy.url}/chat/completions", json=body(False, store=True), headers=alice
        )
        assert made.status_code == 200, made.text
        sent = len(upstream.requests)
        foreign = [
            httpx.get(f"{proxy.url}/chat/completions/chatcmpl-stored-1", headers=bob),
            httpx.get(f"{proxy.url}/chat/completions/chatcmpl-stored-1/messages", headers=bob),
            httpx.delete(f"{proxy.url}/chat//completions/chatcmpl-stored-1", headers=bob),
        ]
        assert len(upstream.requests) == sent
        upstream.script(Json(stored), Json({"data": []}))
        own = httpx.get(f"{proxy.url}/chat/completions/chatcmpl-stored-1", headers=alice)
        messages = httpx.get(
            f"{proxy.url}/chat/completions/chatcmpl-stored-1/messages", headers=alice
        )
        # a completion not sent with store: true was never recorded
        upstream.script(Json({**stored, "id": "chatcmpl-unstored"}))
        httpx.post(f"{proxy.url}/chat/completions", json=body(False), headers=alice)
        unstored = httpx.get(f"{proxy.url}/chat/completions/chatcmpl-unstored", headers=alice)
    assert [r.status_code for r in foreign] == [404, 404, 404]
    assert (own.status_code, messages.status_code, unstored.status_code) == (200, 200, 404)
