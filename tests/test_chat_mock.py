"""The chat endpoint without sockets: the app called in process (httpx's
ASGI transport), its upstream a MockTransport answering from a script.
What goes upstream, what the client gets back, streamed and not, what is
stored, and the upstream's failures before and during a response."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.config import build_config
from proxy.runtime import Runtime
from proxy.upstream import MockResponse, MockTransport, Request, TransportError
from tests.casefiles import chunk, read_stream
from tests.harness import sse

pytestmark = pytest.mark.anyio

ROUTE_KEY = "sk-mock-route-key"
HEADERS = {"Authorization": "Bearer sk-client", "X-Conversation-Id": "mock-1"}
SSE = [("content-type", "text/event-stream")]
JSON = [("content-type", "application/json")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Script:
    """The mock upstream's answers, in turn: a MockResponse, or a
    TransportError to fail the request with."""

    def __init__(self) -> None:
        self.answers: deque[MockResponse | TransportError] = deque()

    def __call__(self, request: Request) -> MockResponse:
        answer = self.answers.popleft()
        if isinstance(answer, TransportError):
            raise answer
        return answer


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def upstream(script: Script) -> MockTransport:
    return MockTransport(script)


@pytest.fixture
async def client(upstream: MockTransport) -> AsyncIterator[httpx.AsyncClient]:
    """The app on the mock transport, its runtime started as the lifespan
    would, called in process."""
    data = {
        "routes": [{"name": "mock", "upstream": "https://upstream.test/v1", "api_key": ROUTE_KEY}]
    }
    config = build_config(data, env={"REASONING_PROXY_SECRET": "mock-secret"})
    runtime = Runtime(config, transport=upstream)
    app = create_app(config, runtime=runtime)
    await runtime.start()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://proxy"
        ) as http:
            yield http
    finally:
        await runtime.close()


def body(stream: bool) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


async def chat(client: httpx.AsyncClient, stream: bool) -> httpx.Response:
    return await client.post("/v1/chat/completions", json=body(stream), headers=HEADERS)


async def stored_turns(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await client.get("/v1/conversations/mock-1", headers=HEADERS)
    assert r.status_code == 200, r.text
    turns: list[dict[str, Any]] = r.json()["turns"]
    return turns


COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "<think>mull</think>Hello"},
            "finish_reason": "stop",
        }
    ],
}


async def test_a_whole_response(
    client: httpx.AsyncClient, upstream: MockTransport, script: Script
) -> None:
    script.answers.append(MockResponse(200, JSON, json.dumps(COMPLETION).encode()))
    r = await chat(client, stream=False)
    assert r.status_code == 200
    message = r.json()["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("Hello", "mull")
    assert r.headers["x-conversation-id"] == "mock-1"
    [sent] = upstream.requests
    assert (sent.origin.scheme, sent.origin.host, sent.origin.port) == (
        "https",
        "upstream.test",
        443,
    )
    assert (sent.method, sent.target) == ("POST", "/v1/chat/completions")
    headers = dict(sent.headers)
    assert headers["authorization"] == f"Bearer {ROUTE_KEY}"  # the route's key, not the client's
    assert headers["accept-encoding"] == "gzip, deflate"
    assert "x-conversation-id" not in headers
    assert sent.body is not None
    assert json.loads(sent.body)["messages"] == [{"role": "user", "content": "hi"}]
    [turn] = await stored_turns(client)
    assert (turn["content"], turn["complete"]) == ("Hello", True)
    assert [b["thought"] for b in turn["blocks"] if b["type"] == "thinking"] == ["mull"]


async def test_a_streamed_response_in_pieces_that_split_events(
    client: httpx.AsyncClient, script: Script
) -> None:
    events = b"".join(
        sse(c)
        for c in [
            chunk({"role": "assistant", "content": "<thi"}),
            chunk({"content": "nk>mull</think>Hel"}),
            chunk({"content": "lo"}, "stop"),
        ]
    )
    events += b"data: [DONE]\n\n"
    pieces = [events[i : i + 7] for i in range(0, len(events), 7)]
    script.answers.append(MockResponse(200, SSE, pieces))
    r = await chat(client, stream=True)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    stream = read_stream(r.content)
    assert (stream["content"], stream["reasoning"], stream["done"]) == ("Hello", "mull", True)
    [turn] = await stored_turns(client)
    assert (turn["content"], turn["complete"], turn["finishReason"]) == ("Hello", True, "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("cause", "status", "code", "message"),
    [
        (
            "refused",
            502,
            "upstream_unreachable",
            "The upstream could not be reached (connection refused).",
        ),
        (
            "idle_timeout",
            504,
            "upstream_timeout",
            "The upstream did not answer within the route's idle timeout (timeouts.idle).",
        ),
        (
            "bad_response",
            502,
            "upstream_bad_response",
            "The upstream's response is not valid HTTP/1.1 (or switches protocols).",
        ),
    ],
)
async def test_an_upstream_failing_before_the_response(
    client: httpx.AsyncClient,
    script: Script,
    stream: bool,
    cause: Any,
    status: int,
    code: str,
    message: str,
) -> None:
    script.answers.append(TransportError(cause, "10.0.0.7:443 said no"))
    r = await chat(client, stream)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["message"] == message
    assert "10.0.0.7" not in r.text  # a transport's detail never reaches the client
    assert await stored_turns_or_none(client) is None


async def stored_turns_or_none(client: httpx.AsyncClient) -> list[Any] | None:
    r = await client.get("/v1/conversations/mock-1", headers=HEADERS)
    return None if r.status_code == 404 else list(r.json()["turns"])


async def test_an_upstream_going_quiet_mid_stream(
    client: httpx.AsyncClient, script: Script
) -> None:
    first = sse(chunk({"role": "assistant", "content": "partial"}))
    script.answers.append(MockResponse(200, SSE, [first, TransportError("idle_timeout")]))
    r = await chat(client, stream=True)
    assert r.status_code == 200
    stream = read_stream(r.content)
    assert stream["content"] == "partial"
    assert [e["code"] for e in stream["errors"]] == ["upstream_timeout"]
    assert not stream["done"]
    [turn] = await stored_turns(client)
    assert (turn["content"], turn["complete"]) == ("partial", False)


async def test_an_upstream_error_status_is_passed_on(
    client: httpx.AsyncClient, script: Script
) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": None}}
    headers = [*JSON, ("retry-after", "7")]
    script.answers.append(MockResponse(429, headers, json.dumps(error).encode()))
    r = await chat(client, stream=True)
    assert r.status_code == 429
    assert r.json() == error
    assert r.headers["retry-after"] == "7"


async def test_long_model_names_are_served_but_not_remembered(
    upstream: MockTransport, script: Script
) -> None:
    """The planner remembers what it decided per model name, for names of a
    bounded length only: a client choosing megabyte-long names cannot grow
    the process (4,096 entries of whole bodies), and is still served."""
    config = build_config(
        {"routes": [{"name": "mock", "upstream": "https://upstream.test/v1"}]},
        env={"REASONING_PROXY_SECRET": "mock-secret"},
    )
    runtime = Runtime(config, transport=upstream)
    app = create_app(config, runtime=runtime)
    await runtime.start()
    names = ["short-model", "x" * 257, "kimi-k2-" + "y" * 100_000]
    dialects: list[str] = []
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://proxy"
        ) as http:
            for name in names * 2:
                script.answers.append(MockResponse(200, JSON, [json.dumps(COMPLETION).encode()]))
                r = await http.post(
                    "/v1/chat/completions",
                    json={"model": name, "messages": [{"role": "user", "content": "hi"}]},
                )
                assert r.status_code == 200, r.text
                dialects.append(r.headers["x-reasoning-dialect"])
    finally:
        await runtime.close()
    # the long kimi name still gets the kimi dialect, decided afresh each time
    assert dialects == ["openai", "openai", "kimi"] * 2
    planner = app.chat.planner
    assert list(planner._routes) == ["short-model"]
    assert {key[1] for key in planner._decided} == {"short-model"}
    sent = [json.loads(r.body or b"{}")["model"] for r in upstream.requests]
    assert [len(m) for m in sent] == [len(n) for n in names * 2]
