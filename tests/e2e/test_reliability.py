"""Holes found by fault injection, each closed and kept closed, through real
sockets: pass-through paths that would leave the route's base path, clients
leaving a pass-through request, route keys quoted back by an upstream, and an
error as the first event of a 200 stream."""

from __future__ import annotations

import gzip
import json
import socket
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.casefiles import chunk, read_stream
from tests.harness import FakeUpstream, Hang, Json, Stream, running_proxy
from tests.messages_wire import sdk_client

KEY = {"Authorization": "Bearer sk-client-key"}
ROUTE_KEY = "rk-route-secret-0123456789"


def tenant_route(upstream: FakeUpstream, **extra: Any) -> dict[str, Any]:
    """A route whose base URL has a path of its own: /tenant-x/v1."""
    base = upstream.url.removesuffix("/v1")
    return {
        "routes": [
            {
                "name": "tenant-x",
                "models": ["*"],
                "upstream": f"{base}/tenant-x/v1",
                "api_key": ROUTE_KEY,
                **extra,
            }
        ]
    }


def raw_request(port: int, target: str, headers: str = "") -> tuple[int, bytes]:
    """Send a request line exactly as written (httpx would resolve dot segments)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            f"GET {target} HTTP/1.1\r\nHost: proxy\r\n{headers}Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk_ := s.recv(65536):
            data += chunk_
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


# -- 1. pass-through paths stay below the route's base path ----------------------


@pytest.mark.parametrize(
    "target",
    [
        "/v1/../../admin",
        "/v1/%2e%2e/%2e%2e/admin",
        "/v1/%2E%2E/%2E%2E/admin",
        "/v1/..%2F..%2Fadmin",
        "/v1/./../admin",
        "/v1/models/../../../admin",
        "/v1/..%5C..%5Cadmin",
        "/v1/%252e%252e/%252e%252e/admin",
        "/v1/models/..",
        "/v1/./models",
        "/v1/models%00",
        "/v1/..;/..;/admin",  # a path parameter some servers strip
        "/v1/%25252e%25252e/admin",  # escaped three times
        "/v1/%EF%BC%8E%EF%BC%8E/admin",  # fullwidth dots, which NFKC folds to '..'
        "/v1/%E2%80%A4%E2%80%A4/admin",  # one dot leaders
    ],
)
def test_a_path_that_could_leave_the_base_is_refused(upstream: FakeUpstream, target: str) -> None:
    with running_proxy(tenant_route(upstream)) as proxy:
        status, body = raw_request(proxy.port, target, "Authorization: Bearer sk-client-key\r\n")
    assert status == 400
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_path"
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == []  # nothing was sent, the route key least of all


def test_a_path_below_the_base_goes_as_written(upstream: FakeUpstream) -> None:
    with running_proxy(tenant_route(upstream)) as proxy:
        status, _ = raw_request(proxy.port, "/v1/models/org%2Fname..x?limit=2")
        assert status == 200
        status, _ = raw_request(proxy.port, "/v1//embeddings")
        assert status == 200
    first, second = upstream.requests
    assert first.path == "/tenant-x/v1/models/org/name..x"  # aiohttp decodes the escape
    assert first.query == "limit=2"
    assert first.headers["authorization"] == f"Bearer {ROUTE_KEY}"
    assert second.path == "/tenant-x/v1//embeddings"


# -- 2. a client leaving a pass-through request ------------------------------------


def test_leaving_a_passthrough_stream_closes_the_upstream(upstream: FakeUpstream) -> None:
    upstream.script(Stream([f"part {i}\n".encode() for i in range(300)], delay=0.1, done=False))
    with running_proxy(tenant_route(upstream)) as proxy, httpx.Client(timeout=30) as client:
        with client.stream("GET", f"{proxy.url}/audio/big/content", headers=KEY) as r:
            assert r.status_code == 200
            for raw in r.iter_raw():
                if b"part 2" in raw:
                    break
        left = time.monotonic()
        assert upstream.disconnected.wait(5)
        assert time.monotonic() - left < 1.0


def test_leaving_before_the_first_byte_closes_the_upstream(upstream: FakeUpstream) -> None:
    upstream.script(Hang())
    with running_proxy(tenant_route(upstream)) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(b"GET /v1/slow HTTP/1.1\r\nHost: proxy\r\n\r\n")
            deadline = time.monotonic() + 5
            while not upstream.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert upstream.requests, "the request never reached the upstream"
            time.sleep(0.2)
        left = time.monotonic()
        assert upstream.disconnected.wait(5)
        assert time.monotonic() - left < 1.0


def test_the_chat_path_also_closes_the_upstream_before_the_first_byte(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Hang())
    with running_proxy(tenant_route(upstream)) as proxy:
        request = json.dumps(
            {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(request)}\r\n\r\n".encode()
                + request
            )
            deadline = time.monotonic() + 5
            while not upstream.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert upstream.requests
        left = time.monotonic()
        assert upstream.disconnected.wait(5)
        assert time.monotonic() - left < 1.0


# -- 6. a route key quoted back by the upstream is masked ---------------------------

QUOTED = {
    "error": {
        "message": f"Incorrect API key provided: {ROUTE_KEY}. You can find your key at ...",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
QUOTED_HEADERS = {"X-Echo-Key": f"Bearer {ROUTE_KEY}"}


def assert_masked(response: httpx.Response) -> None:
    assert ROUTE_KEY not in response.text
    assert all(ROUTE_KEY not in v for v in response.headers.values())
    assert "[REDACTED]" in response.text


def test_a_quoted_key_is_masked_in_a_chat_error(upstream: FakeUpstream) -> None:
    upstream.script(Json(QUOTED, status=401, headers=QUOTED_HEADERS))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers=KEY,
            timeout=30,
        )
    assert r.status_code == 401
    assert_masked(r)
    assert r.headers["x-echo-key"] == "Bearer [REDACTED]"
    assert r.json()["error"]["code"] == "invalid_api_key"


def test_a_quoted_key_is_masked_in_a_chat_stream(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream(
            [chunk({"content": "fine so far"}), QUOTED],
            done=False,
            headers=QUOTED_HEADERS,
        )
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers=KEY,
            timeout=30,
        )
    assert r.status_code == 200
    read = read_stream(r.content)
    # ("r" may come in a chunk of its own: it could have begun the route key)
    assert read["content"] == "fine so far"
    assert read["errors"][0]["code"] == "invalid_api_key"
    assert_masked(r)


@pytest.mark.parametrize("stream", [False, True])
def test_a_quoted_key_is_masked_in_passthrough(upstream: FakeUpstream, stream: bool) -> None:
    # streamed, the key arrives split across two writes
    half = len(ROUTE_KEY) // 2
    if stream:
        upstream.script(
            Stream(
                [
                    b'{"error": "bad key ' + ROUTE_KEY[:half].encode(),
                    ROUTE_KEY[half:].encode() + b'"}',
                ],
                delay=0.2,
                done=False,
                status=401,
                headers=QUOTED_HEADERS,
            )
        )
    else:
        upstream.script(Json(QUOTED, status=401, headers=QUOTED_HEADERS))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = httpx.get(f"{proxy.url}/models", headers=KEY, timeout=30)
    assert r.status_code == 401
    assert_masked(r)


# -- 9. an error as the first event of a 200 stream -----------------------------------


def stream_request(proxy_url: str) -> httpx.Response:
    return httpx.post(
        f"{proxy_url}/chat/completions",
        json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        headers=KEY,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"message": "Rate limit exceeded", "code": 429}, 429),  # OpenRouter's numeric code
        ({"message": "Overloaded", "type": "rate_limit_error", "code": "rate_limit_exceeded"}, 429),
        ({"message": "Provider returned error", "code": 502, "metadata": {"raw": "x"}}, 502),
        ({"message": "Something broke"}, 502),
    ],
)
def test_an_error_as_the_first_event_gets_a_real_status(
    upstream: FakeUpstream, error: dict[str, Any], status: int
) -> None:
    upstream.script(Stream([{"error": error}], done=False))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()["error"]
    assert body["message"] == error["message"]
    assert body["code"] == error.get("code")
    assert set(body) == {"message", "type", "param", "code"}


def test_keepalive_comments_do_not_end_the_wait_for_the_first_event(
    upstream: FakeUpstream,
) -> None:
    upstream.script(
        Stream(
            [
                b": OPENROUTER PROCESSING\n\n",
                b": OPENROUTER PROCESSING\n\n",
                {"error": {"message": "No endpoints found", "code": 404}},
            ],
            delay=0.1,
            done=False,
        )
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "No endpoints found"


def test_a_named_error_event_first_gets_a_real_status(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream(
            [
                b"event: error\n"
                b'data: {"error": {"message": "quota", "code": "insufficient_quota"}}\n\n'
            ],
            done=False,
        )
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "insufficient_quota"


def test_comments_before_a_good_first_event_are_forwarded(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream(
            [
                b": OPENROUTER PROCESSING\n\n",
                chunk({"content": "hello"}),
                chunk({}, "stop"),
            ],
            delay=0.05,
        )
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == 200
    assert r.text.index(": OPENROUTER PROCESSING") < r.text.index("hello")
    assert r.text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("done", [True, False])
def test_an_error_after_the_first_event_stays_an_error_event(
    upstream: FakeUpstream, done: bool
) -> None:
    """Forwarded as it came, and the only error of the stream: an upstream
    that closes after it gets no second one from the proxy."""
    upstream.script(
        Stream(
            [chunk({"content": "partial"}), {"error": {"message": "late", "code": 500}}],
            done=done,
        )
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == 200
    assert '"late"' in r.text
    assert r.text.count('"error"') == 1


GOOD_PARTIAL = b"data: " + json.dumps(chunk({"content": "partial"})).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (b"data: {not json\n\n", "malformed_upstream_event"),
        # a line over limits.max_sse_line_bytes (1,024 here)
        (
            b"data: " + json.dumps(chunk({"content": "x" * 5000})).encode() + b"\n\n",
            "upstream_line_too_long",
        ),
    ],
)
def test_a_failure_in_the_first_read_after_a_good_event_is_an_error_event(
    upstream: FakeUpstream, bad: bytes, code: str
) -> None:
    """The good event and the bad one come in one write (one read): the
    client still gets the good one, then the error event, as when they come
    apart; not a 502 that drops what the upstream already answered."""
    upstream.script(Stream([GOOD_PARTIAL + bad], done=False))
    config = tenant_route(upstream)
    config["limits"] = {"max_sse_line_bytes": 1024}
    with running_proxy(config) as proxy:
        r = stream_request(proxy.url)
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}", headers=KEY
        ).json()
    assert r.status_code == 200
    got = read_stream(r.content)
    assert got["content"] == "partial"
    assert [e["code"] for e in got["errors"]] == [code]
    assert got["done"] is False
    assert stored["turns"][0]["complete"] is False
    assert stored["turns"][0]["content"] == "partial"


def test_a_close_before_any_event_is_a_502(upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"content": "never sent"})], cut_after=0, done=False))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = stream_request(proxy.url)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_disconnected"  # a cut chunked body


DOORS = [
    ("chat/completions", "messages"),
    ("responses", "input"),
    ("messages", "messages"),
]


def door_request(url: str, path: str, field: str, stream: bool) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "stream": stream, "max_tokens": 5}
    body[field] = [{"role": "user", "content": "hi"}]
    return httpx.post(f"{url}/{path}", json=body, headers=KEY, timeout=30)


def door_error(path: str, r: httpx.Response) -> dict[str, Any]:
    """The error object in the door's own shape."""
    data = r.json()
    if path == "messages":
        assert data["type"] == "error"
    error: dict[str, Any] = data["error"]
    return error


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_a_2xx_that_is_not_json_is_a_502_on_every_door(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    upstream.script(Json("hello, not json"))
    upstream.script(Json(b"hello, not json", headers={"Content-Type": "text/plain"}))
    with running_proxy(tenant_route(upstream)) as proxy:
        quoted = door_request(proxy.url, path, field, False)
        plain = door_request(proxy.url, path, field, False)
    for r in (quoted, plain):
        assert r.status_code == 502, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert "not a JSON object" in door_error(path, r)["message"]


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_an_error_object_with_a_2xx_gets_a_real_status_on_every_door(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    upstream.script(Json({"error": {"message": "Rate limit exceeded", "code": 429}}))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, False)
    assert r.status_code == 429, r.text
    assert door_error(path, r)["message"] == "Rate limit exceeded"


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_a_stream_of_only_done_is_a_502_on_every_door(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    """[DONE] with nothing before it is no answer: a 502 naming it, not an
    empty 200."""
    upstream.script(Stream([]))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, True)
        conversation = r.headers.get("x-conversation-id")
    assert r.status_code == 502, r.text
    assert "without sending an answer" in door_error(path, r)["message"]
    assert conversation is not None


@pytest.mark.parametrize(("path", "field"), DOORS)
@pytest.mark.parametrize("choices", [[], None, "absent"])
def test_a_whole_answer_without_choices_is_a_502_on_every_door(
    upstream: FakeUpstream, path: str, field: str, choices: Any
) -> None:
    """`{"choices": []}` is no answer, as a stream of only [DONE] is."""
    body: dict[str, Any] = {"id": "c", "object": "chat.completion", "model": "m"}
    if choices != "absent":
        body["choices"] = choices
    upstream.script(Json(body))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, False)
    assert r.status_code == 502, r.text
    error = door_error(path, r)
    assert error["message"] == "The upstream's answer has no choices."
    if path != "messages":
        assert error["code"] == "upstream_empty_response"


WHOLE = {
    "id": "c",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Four.", "reasoning_content": "2+2"},
            "finish_reason": "stop",
        }
    ],
}


def answer_text(path: str, r: httpx.Response) -> str:
    """The answer's text, from a whole body or an event stream, per door."""
    if r.headers["content-type"].startswith("text/event-stream"):
        data = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: {")]
        if path == "chat/completions":
            return "".join(c["choices"][0]["delta"].get("content") or "" for c in data)
        if path == "responses":
            (done,) = [e for e in data if e["type"] == "response.completed"]
            data = [done["response"]]
        else:
            return "".join(
                e["delta"].get("text", "") for e in data if e["type"] == "content_block_delta"
            )
    body = data[0] if r.headers["content-type"].startswith("text/event-stream") else r.json()
    if path == "chat/completions":
        return str(body["choices"][0]["message"]["content"])
    if path == "responses":
        return "".join(
            part["text"]
            for item in body["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
    return "".join(b["text"] for b in body["content"] if b["type"] == "text")


@pytest.mark.parametrize(("path", "field"), DOORS)
@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_in_the_other_mode_comes_in_the_mode_asked(
    upstream: FakeUpstream, path: str, field: str, stream: bool
) -> None:
    """An upstream that ignores `stream`: a whole answer to a streamed
    request goes out as a stream, a stream to a whole request as one body,
    on every door, and the turn is stored with its reasoning."""
    if stream:
        upstream.script(Json(WHOLE))
    else:
        upstream.script(
            Stream(
                [
                    chunk({"reasoning_content": "2+2"}),
                    chunk({"content": "Four."}),
                    chunk({}, "stop"),
                ]
            )
        )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, stream)
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}", headers=KEY
        ).json()
    assert r.status_code == 200, r.text
    kind = "text/event-stream" if stream else "application/json"
    assert r.headers["content-type"].startswith(kind)
    assert answer_text(path, r) == "Four."
    (turn,) = stored["turns"]
    assert turn["content"] == "Four."
    assert [b["thought"] for b in turn["blocks"]] == ["2+2"]
    assert turn["complete"] is True


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_a_2xx_error_object_to_a_streamed_request_gets_its_status(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    upstream.script(Json({"error": {"message": "Rate limit exceeded", "code": 429}}))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, True)
    assert r.status_code == 429, r.text
    assert door_error(path, r)["message"] == "Rate limit exceeded"


@pytest.mark.parametrize("stream", [True, False])
def test_a_compressed_answer_in_the_other_mode_is_passed_on_decoded(
    upstream: FakeUpstream, stream: bool
) -> None:
    """The transport decodes gzip; a converted body goes on without the
    upstream's Content-Encoding (a client would try to decode it again)."""
    if stream:
        raw = json.dumps(WHOLE).encode()
    else:
        raw = (
            b"".join(
                b"data: " + json.dumps(c).encode() + b"\n\n"
                for c in [chunk({"reasoning_content": "2+2"}), chunk({"content": "Four."}, "stop")]
            )
            + b"data: [DONE]\n\n"
        )
    kind = "application/json" if stream else "text/event-stream"
    upstream.script(
        Json(gzip.compress(raw), headers={"Content-Encoding": "gzip", "Content-Type": kind})
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, "chat/completions", "messages", stream)
    assert r.status_code == 200, r.text
    assert "content-encoding" not in r.headers
    assert answer_text("chat/completions", r) == "Four."


@pytest.mark.parametrize(
    ("answer", "status", "code"),
    [
        (Stream([chunk({"content": "half"})], done=False), 502, "upstream_closed"),
        (
            Stream([chunk({"content": "half"}), {"error": {"message": "late", "code": 503}}]),
            503,
            503,
        ),
        (Stream([chunk({"content": "x" * 5000})]), 502, "upstream_line_too_long"),
    ],
)
def test_a_stream_to_a_whole_request_that_fails_is_an_error(
    upstream: FakeUpstream, answer: Stream, status: int, code: Any
) -> None:
    upstream.script(answer)
    config = tenant_route(upstream)
    config["limits"] = {"max_sse_line_bytes": 1024}
    with running_proxy(config) as proxy:
        r = door_request(proxy.url, "chat/completions", "messages", False)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


def test_the_openai_sdk_raises_the_status_error(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream([{"error": {"message": "Rate limit exceeded", "code": 429}}], done=False)
    )
    with running_proxy(tenant_route(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-client-key", max_retries=0)
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "hi"}]
            )
    assert "Rate limit exceeded" in str(caught.value)


# -- 10. pass-through keeps the routes' model restrictions ------------------------
# Regression: pass-through read the model only under a Content-Type
# starting with lowercase `application/json`: any other spelling sent a paid
# model to the first route's upstream, with its key.

CHEAP_KEY = "sk-cheap-route-key-0123456789"


def restricted_routes(cheap: FakeUpstream, other: FakeUpstream) -> dict[str, Any]:
    """Only `cheap-*` (with a route key) and `other-*`, no catch-all."""
    return {
        "routes": [
            {"name": "cheap", "models": ["cheap-*"], "upstream": cheap.url, "api_key": CHEAP_KEY},
            {"name": "other", "models": ["other-*"], "upstream": other.url},
        ]
    }


EXPENSIVE = b'{"model": "expensive-o1-pro", "input": "hello"}'
EXPENSIVE_CHAT = b'{"model": "expensive-o1-pro", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.mark.parametrize(
    ("path", "content_type", "body"),
    [
        ("/v1/embeddings", "Application/JSON", EXPENSIVE),
        ("/v1/embeddings", "APPLICATION/JSON; charset=utf-8", EXPENSIVE),
        ("/v1/embeddings", "application/json; charset=utf-8", EXPENSIVE),
        ("/v1/embeddings", "text/plain", EXPENSIVE),
        ("/v1/embeddings", None, EXPENSIVE),
        ("/v1/embeddings", "application/x-www-form-urlencoded", EXPENSIVE),
        # what Python's json (FastAPI, vLLM...) reads and orjson does not
        ("/v1/embeddings", "text/plain", b"\xef\xbb\xbf" + EXPENSIVE),
        ("/v1/embeddings", "text/plain", EXPENSIVE.decode().encode("utf-16")),
        ("/v1/embeddings", "text/plain", b'{"model": "expensive-o1-pro", "dimensions": NaN}'),
        ("/v1/chat/completions/", "text/plain", EXPENSIVE_CHAT),
        ("/v1//chat/completions", "text/plain", EXPENSIVE_CHAT),
    ],
    ids=[
        "mixed-case",
        "upper-case-charset",
        "charset",
        "text-plain",
        "no-content-type",
        "form-urlencoded",
        "utf-8-bom",
        "utf-16",
        "nan",
        "chat-trailing-slash",
        "chat-double-slash",
    ],
)
def test_a_model_no_route_serves_is_404_whatever_the_content_type(
    path: str, content_type: str | None, body: bytes
) -> None:
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    headers = {**KEY, **({"Content-Type": content_type} if content_type else {})}
    try:
        with running_proxy(restricted_routes(cheap, other)) as proxy:
            r = httpx.post(f"{proxy.base}{path}", content=body, headers=headers, timeout=30)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "model_not_found"
        assert cheap.requests == []
        assert other.requests == []
    finally:
        cheap.stop()
        other.stop()


def test_a_json_body_under_any_content_type_goes_to_its_models_route() -> None:
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    try:
        with running_proxy(restricted_routes(cheap, other)) as proxy:
            r = httpx.post(
                f"{proxy.url}/embeddings",
                content=b'{"model": "other-embed", "input": "hello"}',
                headers={**KEY, "Content-Type": "text/plain"},
                timeout=30,
            )
            wrong_type = httpx.post(
                f"{proxy.url}/embeddings",
                content=b'{"model": ["expensive-o1-pro"], "input": "hello"}',
                headers={**KEY, "Content-Type": "text/plain"},
                timeout=30,
            )
            # deeper than the proxy's parsers go, not than every upstream's
            too_deep = httpx.post(
                f"{proxy.url}/embeddings",
                content=b'{"model": "expensive-o1-pro", "x": ' + b"[" * 1100 + b"]" * 1100 + b"}",
                headers={**KEY, "Content-Type": "text/plain"},
                timeout=30,
            )
            # a body that is not JSON names no model: the default route, as before
            upload = httpx.post(
                f"{proxy.url}/audio/transcriptions",
                files={"file": ("a.jsonl", b'{"model": "expensive-o1-pro"}\n')},
                data={"purpose": "batch"},
                headers=KEY,
                timeout=30,
            )
        assert r.status_code == 200
        assert other.requests[0].headers["Authorization"] == KEY["Authorization"]
        assert wrong_type.status_code == 400
        assert wrong_type.json()["error"]["param"] == "model"
        assert too_deep.status_code == 400
        assert too_deep.json()["error"]["code"] == "invalid_json"
        assert upload.status_code == 200
        assert [q.path for q in cheap.requests] == ["/v1/audio/transcriptions"]
        assert cheap.requests[0].headers["Authorization"] == f"Bearer {CHEAP_KEY}"
        assert len(other.requests) == 1
    finally:
        cheap.stop()
        other.stop()


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions/", "/v1//chat/completions", "/v1/chat//completions/"]
)
def test_the_chat_path_with_extra_slashes_is_the_chat_door(
    upstream: FakeUpstream, path: str
) -> None:
    """Not pass-through: the chat door's checks apply (here: a bad setting)."""
    with running_proxy(tenant_route(upstream)) as proxy:
        bad = httpx.post(
            f"{proxy.base}{path}",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={**KEY, "X-Reasoning-Format": "bogus"},
            timeout=30,
        )
        ok = httpx.post(
            f"{proxy.base}{path}",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers=KEY,
            timeout=30,
        )
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_reasoning_setting"
    assert ok.status_code == 200
    assert [r.path for r in upstream.requests] == ["/tenant-x/v1/chat/completions"]


# -- an answer that ends in an error (OpenRouter's shape) -------------------------
#
# OpenRouter fails a stream it has begun with a chunk holding an `error` at the
# top and a choice ended with finish_reason "error"; a whole answer that
# failed holds the error in the choice.

OPENROUTER_ERROR = {
    "id": "gen-1",
    "object": "chat.completion.chunk",
    "model": "m",
    "provider": "Some",
    "error": {"code": 429, "message": "Rate limited by the provider"},
    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
}


def sdk_stream(proxy_base: str, path: str) -> Any:
    """Read the door's stream with its own SDK; what it raised, or the
    Responses stream's last event."""
    if path == "messages":
        client = sdk_client(proxy_base, "sk-client-key")
        with client.messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            return stream.get_final_message()
    with openai.OpenAI(base_url=proxy_base + "/v1", api_key="sk-client-key", max_retries=0) as sdk:
        if path == "responses":
            return list(sdk.responses.create(model="m", input="hi", stream=True))[-1]
        messages: Any = [{"role": "user", "content": "hi"}]
        return list(sdk.chat.completions.create(model="m", messages=messages, stream=True))


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_an_error_chunk_with_choices_first_gets_its_status_on_every_door(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    upstream.script(Stream([b": OPENROUTER PROCESSING\n\n", OPENROUTER_ERROR], done=False))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, True)
    assert r.status_code == 429, r.text
    assert door_error(path, r)["message"] == "Rate limited by the provider"


@pytest.mark.parametrize(("path", "field"), DOORS)
def test_a_stream_that_ends_in_an_error_chunk_fails_on_every_door(
    upstream: FakeUpstream, path: str, field: str
) -> None:
    """Not a finished answer: the door's own failure, and the turn is stored
    incomplete."""
    upstream.script(Stream([chunk({"content": "Hel"}), OPENROUTER_ERROR]))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, True)
        conversation = r.headers["x-conversation-id"]
        upstream.script(Stream([chunk({"content": "Hel"}), OPENROUTER_ERROR]))
        if path == "responses":
            last = sdk_stream(proxy.base, path)
            assert last.type == "response.failed"
            assert last.response.error.message.startswith("Rate limited by the provider")
        else:
            error = openai.APIError if path == "chat/completions" else anthropic.APIStatusError
            with pytest.raises(error, match="Rate limited by the provider"):
                sdk_stream(proxy.base, path)
        stored = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=KEY).json()
    assert r.status_code == 200
    assert "Rate limited by the provider" in r.text
    (turn,) = stored["turns"]
    assert (turn["content"], turn["complete"]) == ("Hel", False)


@pytest.mark.parametrize(("path", "field"), DOORS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_whole_answer_whose_choice_failed_gets_its_status_on_every_door(
    upstream: FakeUpstream, path: str, field: str, stream: bool
) -> None:
    failed = {
        "id": "gen-2",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ""},
                "finish_reason": "error",
                "error": {"code": 502, "message": "This model is experiencing high demand."},
            }
        ],
    }
    upstream.script(Json(failed))
    with running_proxy(tenant_route(upstream)) as proxy:
        r = door_request(proxy.url, path, field, stream)
    assert r.status_code == 502, r.text
    assert door_error(path, r)["message"] == "This model is experiencing high demand."
