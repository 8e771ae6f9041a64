"""Exchanges cut short, on every front door (chat completions, Responses,
Messages), streamed and whole, through the real server on real sockets: the
client leaves at any point, the upstream closes, resets, truncates its
chunked body, goes quiet past the idle timeout or sends garbage, or the
server itself is stopped mid-stream. Whatever happens:

- every client call ends (no hang): a complete answer, or an error in its
  door's own shape (a status and error body, or the door's error event at
  the end of a stream, never a clean end of a truncated one);
- the stored turn is complete exactly when the answer was, and incomplete
  (or absent) when it was cut;
- nothing leaks: the in-flight gauges in /metrics return to 0, the
  upstream connection is closed, and a normal request still succeeds;
- the server logs no traceback.
"""

from __future__ import annotations

import logging
import random
import signal
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.casefiles import chunk, read_stream
from tests.e2e.test_messages_native import anthropic_stream
from tests.e2e.test_shutdown import Serve, assert_clean
from tests.harness import FakeUpstream, Hang, Json, ProxyServer, Stream, running_proxy
from tests.messages_wire import sdk_client
from tests.stores.servers import wait_until
from tests.test_responses_native import upstream_stream

KEY = {"Authorization": "Bearer sk-cut-short"}
IDLE = 1.0  # the route's idle timeout, seconds
DOORS = ("chat", "responses", "messages")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
ARGS = ['{"q"', ': "a', "bc", '"}']

# -- the upstream's answer: reasoning, text, then a tool call, in small pieces ----------

REASONING = [chunk({"role": "assistant", "reasoning_content": ""})] + [
    chunk({"reasoning_content": f"r{i} "}) for i in range(4)
]
TEXT = [chunk({"content": f"t{i} "}) for i in range(4)]
CALL = [
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_cut1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }
            ]
        }
    )
] + [chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in ARGS]
FINISH = [
    chunk({}, "tool_calls"),
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17},
    },
]
EVENTS = [*REASONING, *TEXT, *CALL, *FINISH]  # then data: [DONE]
# where each phase starts, in events (the [DONE] is event len(EVENTS))
MID_REASONING, MID_TEXT, MID_ARGS = 3, len(REASONING) + 2, len(REASONING) + len(TEXT) + 2
AFTER_FINISH = len(REASONING) + len(TEXT) + len(CALL) + 1
GARBAGE = b'data: {"choices": [{"delta": {"content": "x"\xff\xfe garbage\n\n'

COMPLETION = {
    "id": "chatcmpl-cut",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "reasoning_content": "r0 r1 r2 r3",
                "content": "t0 t1 t2 t3",
                "tool_calls": [
                    {
                        "id": "call_cut1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "".join(ARGS)},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17},
}
COMPLETION_BYTES = orjson.dumps(COMPLETION)


def stream(delay: float = 0.02, **kw: Any) -> Stream:
    return Stream(list(EVENTS), delay=delay, **kw)


# -- requests, in each door's wire ---------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def request_body(door: str, streamed: bool) -> dict[str, Any]:
    if door == "chat":
        return {
            "model": "m",
            "stream": streamed,
            "messages": [{"role": "user", "content": "look it up"}],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}],
        }
    if door == "responses":
        return {
            "model": "m",
            "stream": streamed,
            "input": "look it up",
            "tools": [{"type": "function", "name": "lookup", "parameters": SCHEMA}],
        }
    return {
        "model": "m",
        "stream": streamed,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "look it up"}],
        "tools": [{"name": "lookup", "input_schema": SCHEMA}],
    }


def headers_for(conversation: str) -> dict[str, str]:
    return {**KEY, "X-Conversation-Id": conversation, "anthropic-version": "2023-06-01"}


# -- what the client got -----------------------------------------------------------------------


@dataclass
class Got:
    """What one client call ended with: `complete` (a whole answer, its
    text and tool call), or `error` (in the door's own shape), or `left`
    (the client hung up first)."""

    kind: str  # "complete" | "error" | "left"
    text: str = ""
    call_ids: list[str] = field(default_factory=list)
    status: int = 0
    error: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""


def events_of(body: bytes) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) of each SSE event; a data of [DONE] stays bytes."""
    out: list[tuple[str | None, Any]] = []
    for raw in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
        if data:
            joined = b"\n".join(data)
            out.append((name, joined if joined == b"[DONE]" else orjson.loads(joined)))
    return out


def named(error: dict[str, Any], *keys: str) -> None:
    """Each of `keys` is a non-empty string in `error`."""
    for key in keys:
        assert isinstance(error.get(key), str), (key, error)
        assert error[key], (key, error)


def judge_error_body(door: str, status: int, body: bytes) -> Got:
    """A whole error answer: an error status and the door's error object."""
    assert status >= 400, (status, body)
    data = orjson.loads(body)
    if door == "messages":
        assert data["type"] == "error", data
        error = data["error"]
        named(error, "type")
    else:
        error = data["error"]
        named(error, "type", "code")
    named(error, "message")
    return Got("error", status=status, error=error, body=body)


def judge(door: str, streamed: bool, status: int, body: bytes) -> Got:
    """The door's answer, read to its end: complete, or a clear error; a
    stream that ends with neither is a failure of the test."""
    if status != 200:
        return judge_error_body(door, status, body)
    if not streamed:
        data = orjson.loads(body)
        if door == "chat":
            message = data["choices"][0]["message"]
            ids = [c["id"] for c in message.get("tool_calls") or []]
            return Got("complete", message.get("content") or "", ids, 200, body=body)
        if door == "responses":
            assert data["status"] == "completed", data
            text = "".join(
                part["text"]
                for item in data["output"]
                if item["type"] == "message"
                for part in item["content"]
            )
            ids = [item["call_id"] for item in data["output"] if item["type"] == "function_call"]
            return Got("complete", text, ids, 200, body=body)
        assert data["type"] == "message", data
        text = "".join(b["text"] for b in data["content"] if b["type"] == "text")
        ids = [b["id"] for b in data["content"] if b["type"] == "tool_use"]
        return Got("complete", text, ids, 200, body=body)
    if door == "chat":
        read = read_stream(body)
        if read["errors"]:
            assert not read["done"], body
            [error] = read["errors"]
            named(error, "message", "type", "code")
            last = events_of(body)[-1][1]
            assert "error" in last, body  # the error event ends the stream
            return Got("error", status=200, error=error, body=body)
        assert read["done"], f"a stream that ended with neither [DONE] nor an error: {body!r}"
        assert read["finish_reason"], body
        return Got("complete", read["content"], read["tool_call_ids"], 200, body=body)
    events = events_of(body)
    assert events, f"an empty stream: {body!r}"
    name, data = events[-1]
    if door == "responses":
        if name == "response.failed":
            error = data["response"]["error"]
            named(error, "code", "message")
            return Got("error", status=200, error=error, body=body)
        assert name == "response.completed", f"a stream that ended without its end: {body!r}"
        output = data["response"]["output"]
        text = "".join(
            part["text"] for item in output if item["type"] == "message" for part in item["content"]
        )
        ids = [item["call_id"] for item in output if item["type"] == "function_call"]
        return Got("complete", text, ids, 200, body=body)
    if name == "error":
        assert data["type"] == "error", data
        named(data["error"], "type", "message")
        assert "message_stop" not in [n for n, _ in events], body
        return Got("error", status=200, error=data["error"], body=body)
    assert name == "message_stop", f"a stream that ended without message_stop: {body!r}"
    text = ""
    ids = []
    for n, d in events:
        if n == "content_block_start" and d["content_block"]["type"] == "tool_use":
            ids.append(d["content_block"]["id"])
        if n == "content_block_delta" and d["delta"]["type"] == "text_delta":
            text += d["delta"]["text"]
    return Got("complete", text, ids, 200, body=body)


def call(
    base: str, door: str, streamed: bool, conversation: str, leave_at: bytes | None = None
) -> Got:
    """One request, read to its end (a read that waits 10 s fails the test:
    a hang); with `leave_at`, the client hangs up once those bytes came."""
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST",
            base + PATHS[door],
            json=request_body(door, streamed),
            headers=headers_for(conversation),
        ) as r,
    ):
        data = b""
        for raw in r.iter_raw():
            data += raw
            if leave_at is not None and leave_at in data:
                return Got("left", status=r.status_code, body=data)
        status = r.status_code
    assert leave_at is None, f"the stream ended before {leave_at!r}: {data!r}"
    return judge(door, streamed, status, data)


def leave_before_the_head(
    proxy: ProxyServer, upstream: FakeUpstream, door: str, streamed: bool, conv: str
) -> None:
    """Send the request on a raw socket and close it once the upstream has it."""
    body = orjson.dumps(request_body(door, streamed))
    head = "".join(f"{k}: {v}\r\n" for k, v in headers_for(conv).items())
    seen = len(upstream.requests)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(
            f"POST {PATHS[door]} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
            f"{head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until(lambda: len(upstream.requests) > seen, 10, "the request upstream")


# -- the proxy's own account: /metrics and the store -------------------------------------------


def gauge(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]
    return sum(values)


def settled(base: str) -> bool:
    """No request being answered and no upstream slot held."""
    return (
        gauge(base, "reasoning_proxy_requests_in_flight") <= 1  # this scrape itself, at most
        and gauge(base, "reasoning_proxy_upstream_in_flight") == 0
    )


def turns(base: str, conversation: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/v1/conversations/{conversation}", headers=KEY, timeout=10)
    if r.status_code == 404:
        return []
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["turns"]
    return found


def no_tracebacks(records: list[logging.LogRecord]) -> None:
    for record in records:
        assert record.exc_info is None, record.getMessage()
        text = record.getMessage()
        for word in ("Traceback", "Exception in ASGI application", "CancelledError"):
            assert word not in text, text


def check_after(
    base: str,
    conversation: str,
    got: Got,
    *,
    cut: bool | None,
    calls: tuple[str, ...] = ("call_cut1",),
) -> None:
    """Once the proxy settled: the stored turn agrees with what the client
    got. `cut`: the upstream's answer (or the client's read of it) stopped
    before its end, so it must not be complete (None: it broke after its
    finish_reason, and either outcome is right)."""
    wait_until(lambda: settled(base), 10, "the in-flight gauges to return to 0")
    stored = turns(base, conversation)
    assert len(stored) <= 1, stored
    if got.kind == "complete":
        assert cut is not True, f"a cut answer was given as complete: {got.body!r}"
        [turn] = stored  # a complete answer is never lost
        assert turn["complete"] is True, turn
        assert turn["content"].split() == got.text.split(), (turn, got.text)
        assert turn["toolCallIds"] == got.call_ids == list(calls), turn
    elif stored:
        assert stored[0]["complete"] is False, stored  # cut, and marked so


# -- fixtures ----------------------------------------------------------------------------------


def proxy_config(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        # few upstream slots and a short queue: a leaked slot shows at once
        "server": {"upstream_max_in_flight": 2, "upstream_queue_timeout": 2},
        "routes": [
            {
                "name": "test",
                "models": ["*"],
                "upstream": upstream.url,
                "timeouts": {"idle": IDLE, "connect": 2},
            }
        ],
    }


@pytest.fixture(scope="module")
def cut_upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cut_proxy(cut_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(proxy_config(cut_upstream)) as proxy:
        yield proxy


@pytest.fixture
def up(cut_upstream: FakeUpstream, cut_proxy: ProxyServer) -> FakeUpstream:
    wait_until(lambda: settled(cut_proxy.base), 10, "the proxy to settle")
    cut_upstream.reset()
    return cut_upstream


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO)
    yield caplog
    no_tracebacks(caplog.records)


_names = iter(range(1_000_000))


def conversation(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


# -- 1. the client leaves -------------------------------------------------------------------

LEAVE_POINTS = {
    # where the client hangs up: the bytes it waits for
    "after-head": None,
    "mid-reasoning": b"r1",
    "mid-text": b"t1",
    "mid-arguments": b'\\"a',  # the second piece of the arguments (escaped in JSON)
}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("point", list(LEAVE_POINTS))
def test_the_client_leaves_mid_stream(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str, point: str
) -> None:
    conv = conversation(f"leave-{point}")
    leave_at = LEAVE_POINTS[point]
    if leave_at is None:  # the head came (with the first event); the upstream holds the rest
        held = Stream(list(EVENTS), delay=0.05, gate_after=1)
        up.script(held)
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST",
                cut_proxy.base + PATHS[door],
                json=request_body(door, True),
                headers=headers_for(conv),
            ) as r,
        ):
            assert r.status_code == 200
        held.gate.set()  # the upstream writes on, into a closed connection
        got = Got("left")
    else:
        up.script(stream(delay=0.05))
        got = call(cut_proxy.base, door, True, conv, leave_at=leave_at)
    assert got.kind == "left"
    assert up.disconnected.wait(10), "the upstream connection stayed open"
    check_after(cut_proxy.base, conv, got, cut=True)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("streamed", [True, False])
def test_the_client_leaves_before_the_head(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str, streamed: bool
) -> None:
    up.script(Hang())
    conv = conversation("leave-head")
    leave_before_the_head(cut_proxy, up, door, streamed, conv)
    assert up.disconnected.wait(10), "the upstream connection stayed open"
    check_after(cut_proxy.base, conv, Got("left"), cut=True)


@pytest.mark.parametrize("door", DOORS)
def test_the_client_leaves_while_the_upstream_is_slow(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str
) -> None:
    slow = stream(delay=0.05, gate_after=MID_TEXT)  # the upstream pauses mid-text
    up.script(slow)
    conv = conversation("leave-slow")
    got = call(cut_proxy.base, door, True, conv, leave_at=b"t0")
    slow.gate.set()  # the upstream writes on, into a closed connection
    assert up.disconnected.wait(10), "the upstream connection stayed open"
    check_after(cut_proxy.base, conv, got, cut=True)


FINAL = {"chat": b"[DONE]", "responses": b"response.completed", "messages": b"message_stop"}


@pytest.mark.parametrize("door", DOORS)
def test_the_client_leaves_right_after_the_last_event(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str
) -> None:
    up.script(stream())
    conv = conversation("leave-last")
    got = call(cut_proxy.base, door, True, conv, leave_at=FINAL[door])
    wait_until(lambda: settled(cut_proxy.base), 10, "the proxy to settle")
    # the client saw the end: the turn is stored, complete
    [turn] = turns(cut_proxy.base, conv)
    assert turn["complete"] is True, turn
    assert turn["toolCallIds"] == ["call_cut1"]
    assert got.kind == "left"


# -- 2. the upstream breaks --------------------------------------------------------------------

# name -> (the upstream's answer to a streamed request, whether it is cut;
# a connection that breaks after the finish_reason leaves a whole answer)
UPSTREAM_FAULTS: dict[str, tuple[Any, bool | None]] = {
    "close-mid-reasoning": (stream(cut_after=MID_REASONING), True),
    "reset-mid-text": (stream(cut_after=MID_TEXT, cut="reset"), True),
    "truncated-chunk-mid-arguments": (stream(cut_after=MID_ARGS, cut="partial"), True),
    "close-before-any-event": (stream(cut_after=0), True),
    "reset-before-any-event": (stream(cut_after=0, cut="reset"), True),
    "stall-mid-text": (stream(hang_after=MID_TEXT), True),
    "stall-before-any-event": (stream(hang_after=0), True),
    "stall-before-the-head": (Hang(), True),
    "garbage-mid-text": (
        Stream([*EVENTS[:MID_TEXT], GARBAGE, *EVENTS[MID_TEXT:]], delay=0.02),
        True,
    ),
    "garbage-mid-arguments": (
        Stream([*EVENTS[:MID_ARGS], b"data: \x00\x01\x02 not json\n\n"], delay=0.02, done=False),
        True,
    ),
    "close-after-the-finish": (stream(cut_after=AFTER_FINISH), False),
    "reset-after-the-finish": (stream(cut_after=AFTER_FINISH, cut="reset"), False),
    # half of the usage chunk, then the connection breaks
    "usage-cut-after-the-finish": (stream(cut_after=AFTER_FINISH, cut="partial"), False),
    "no-done-after-the-finish": (stream(done=False), False),
    "complete": (stream(), False),
}

# name -> (the upstream's answer to a whole request, whether it is cut)
WHOLE_FAULTS: dict[str, tuple[Any, bool]] = {
    "truncated-body": (Json(COMPLETION_BYTES, cut_at=len(COMPLETION_BYTES) // 2), True),
    "reset-mid-body": (Json(COMPLETION_BYTES, cut_at=40, cut="reset"), True),
    "close-before-the-body": (Json(COMPLETION_BYTES, cut_at=0), True),
    "stall-before-the-head": (Hang(), True),
    "slower-than-idle": (Json(COMPLETION_BYTES, delay=IDLE * 3), True),
    "garbage-body": (Json(b'{"id": "x", "choices": [\xff garbage'), True),
    # an upstream that streams though asked for a whole answer, and breaks
    "stream-closed-mid-text": (stream(cut_after=MID_TEXT), True),
    "stream-stalled-mid-text": (stream(hang_after=MID_TEXT), True),
    "complete": (Json(COMPLETION), False),
    "complete-as-a-stream": (stream(), False),
}


def fresh(answer: Any) -> Any:
    """A copy of a scripted answer (a Stream's gate is per use)."""
    if isinstance(answer, Stream):
        return Stream(
            list(answer.chunks),
            delay=answer.delay,
            done=answer.done,
            cut_after=answer.cut_after,
            cut=answer.cut,
            hang_after=answer.hang_after,
            gate_after=answer.gate_after,
        )
    return answer


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("fault", list(UPSTREAM_FAULTS))
def test_the_upstream_breaks_a_stream(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str, fault: str
) -> None:
    answer, cut = UPSTREAM_FAULTS[fault]
    up.script(fresh(answer))
    conv = conversation(f"up-{fault}")
    got = call(cut_proxy.base, door, True, conv)
    if cut:
        assert got.kind == "error", got.body
    elif cut is False:
        assert got.kind == "complete", got.body
    if got.kind == "complete":
        assert got.text.split() == ["t0", "t1", "t2", "t3"]
    check_after(cut_proxy.base, conv, got, cut=cut)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("fault", list(WHOLE_FAULTS))
def test_the_upstream_breaks_a_whole_answer(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str, fault: str
) -> None:
    answer, cut = WHOLE_FAULTS[fault]
    up.script(fresh(answer))
    conv = conversation(f"whole-{fault}")
    got = call(cut_proxy.base, door, False, conv)
    if cut:
        assert got.kind == "error", got.body
        assert got.status in (502, 504), got.body
    else:
        assert got.kind == "complete", got.body
        assert got.text.split() == ["t0", "t1", "t2", "t3"]
    check_after(cut_proxy.base, conv, got, cut=cut)


# -- 3. the SDKs see the failures as errors -----------------------------------------------------


def test_the_sdks_raise_on_a_cut_stream(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any
) -> None:
    client = openai.OpenAI(base_url=cut_proxy.url, api_key="sk-cut-short", max_retries=0)
    up.script(stream(cut_after=MID_TEXT))
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass
    up.script(stream(cut_after=MID_TEXT, cut="reset"))
    events = list(client.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.failed"
    up.script(stream(cut_after=MID_ARGS, cut="partial"))
    sdk = sdk_client(cut_proxy.base, "sk-cut-short")
    with (
        pytest.raises(anthropic.APIStatusError),
        sdk.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as s,
    ):
        for _ in s:
            pass
    client.close()


# -- 4. a seeded random walk, then a normal request ---------------------------------------------


def random_case(rng: random.Random) -> tuple[str, bool, Any, bytes | None, bool | None]:
    """(door, streamed, the upstream's answer, where the client leaves, cut)"""
    door = rng.choice(DOORS)
    streamed = rng.random() < 0.7
    if not streamed:
        name = rng.choice(list(WHOLE_FAULTS))
        answer, cut = WHOLE_FAULTS[name]
        return door, False, fresh(answer), None, cut
    roll = rng.random()
    n = rng.randrange(0, len(EVENTS) + 1)
    if roll < 0.3:  # the client leaves after some text of the answer
        leave = rng.choice([b"r0", b"r2", b"t0", b"t3", b"lookup", FINAL[door]])
        return door, True, stream(delay=0.03), leave, True
    if roll < 0.5:
        how = rng.choice(["close", "reset", "partial"])
        return door, True, stream(cut_after=n, cut=how), None, n < AFTER_FINISH or None
    if roll < 0.6:
        return door, True, stream(hang_after=n), None, n < AFTER_FINISH or None
    if roll < 0.75:
        junk = rng.choice([GARBAGE, b"data: {\n\n", b"\xff\xfe\xfd\n\n", b"data: [1, 2\n\n"])
        events = [*EVENTS[:n], junk, *EVENTS[n:]]
        # (a line without a field name is ignored by SSE readers)
        ignored = junk == b"\xff\xfe\xfd\n\n"
        return door, True, Stream(events, delay=0.01), None, None if ignored else True
    return door, True, stream(delay=0.01), None, False


@pytest.mark.parametrize("seed", [7, 1234])
def test_a_random_walk_of_cuts_leaks_nothing(
    cut_proxy: ProxyServer, up: FakeUpstream, logs: Any, seed: int
) -> None:
    rng = random.Random(seed)
    for n in range(20):
        door, streamed, answer, leave, cut = random_case(rng)
        up.reset()
        up.script(answer)
        conv = conversation(f"walk-{seed}-{n}")
        got = call(cut_proxy.base, door, streamed, conv, leave_at=leave)
        if got.kind == "left" and leave == FINAL[door]:
            wait_until(lambda: settled(cut_proxy.base), 10, "the proxy to settle")
            [turn] = turns(cut_proxy.base, conv)
            assert turn["complete"] is True, (n, turn)
            continue
        if cut is True:
            assert got.kind != "complete", (n, door, streamed, answer, got.body)
        elif cut is False and leave is None:
            assert got.kind == "complete", (n, door, streamed, answer, got.body)
        check_after(cut_proxy.base, conv, got, cut=True if got.kind == "left" else cut)
    # nothing leaked: a normal request on each door still succeeds
    for door in DOORS:
        up.reset()
        up.script(stream())
        conv = conversation("after-walk")
        got = call(cut_proxy.base, door, True, conv)
        assert got.kind == "complete", got.body
        check_after(cut_proxy.base, conv, got, cut=False)


# -- 5. the server is stopped mid-answer -------------------------------------------------------


def read_once_started(
    base: str, door: str, streamed: bool, conv: str, started: threading.Event
) -> Got:
    """A request read to its end; `started` is set at its first text (or,
    for a whole answer, never: the test waits on the upstream instead)."""
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", base + PATHS[door], json=request_body(door, streamed), headers=headers_for(conv)
        ) as r,
    ):
        data = b""
        for raw in r.iter_raw():
            data += raw
            if b"t0" in data:
                started.set()
        status = r.status_code
    return judge(door, streamed, status, data)


def test_sigterm_cuts_every_door_in_its_own_shape(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = {
        "server": {"shutdown_grace_seconds": 0.5},
        "store": {"url": f"sqlite:///{tmp_path}/turns.db"},
        "routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}],
    }
    proxy = Serve(tmp_path, config).start()
    long = [*REASONING, *TEXT, *[chunk({"content": f"w{i} "}) for i in range(300)], *FINISH]
    cases = [(door, streamed) for door in DOORS for streamed in (True, False)]
    try:
        with ThreadPoolExecutor(len(cases)) as pool:
            futures = {}
            for n, (door, streamed) in enumerate(cases):
                # one after the other, so each gets its own scripted answer
                upstream.script(Stream(long, delay=0.1) if streamed else Hang())
                started = threading.Event()
                conv = f"sigterm-{door}-{'stream' if streamed else 'whole'}"
                futures[conv] = (
                    door,
                    streamed,
                    pool.submit(read_once_started, proxy.base, door, streamed, conv, started),
                )
                if streamed:
                    wait_until(started.is_set, 15, f"the {door} stream to start")
                else:
                    wait_until(
                        lambda n=n: len(upstream.requests) == n + 1, 15, "the request upstream"
                    )
            proxy.signal(signal.SIGTERM)
            got = {
                conv: (door, streamed, f.result(30))
                for conv, (door, streamed, f) in futures.items()
            }
        assert proxy.wait(30) == 0
        assert_clean(proxy.output())
    finally:
        proxy.stop()
    for conv, (door, streamed, answer) in got.items():
        assert answer.kind == "error", (conv, answer.body)
        if streamed:
            assert answer.status == 200  # cut mid-stream: the door's error event ends it
        else:
            assert answer.status == 503, (conv, answer.body)
        assert "shutting down" in answer.error["message"], answer.error
        if door == "messages":
            assert answer.error["type"] == "overloaded_error"  # streamed or whole
        elif door == "responses" and streamed:  # response.failed names the code in its message
            assert answer.error["message"].endswith("(server_shutting_down)"), answer.error
        else:
            assert answer.error["code"] == "server_shutting_down", answer.error
    # the cut turns outlived the process, each marked incomplete (a whole
    # answer cut before the upstream's head has no turn to store)
    again = Serve(tmp_path, config).start()
    try:
        for conv, (_, streamed, _) in got.items():
            stored = [t["complete"] for t in turns(again.base, conv)]
            assert stored == [False] if streamed else stored in ([], [False]), (conv, stored)
    finally:
        again.stop()
    assert_clean(again.output())


# -- 6. the same cuts where the upstream speaks the door's own API (passed through) ---------


def native_events() -> dict[str, tuple[str, list[bytes], tuple[str, ...]]]:
    """door -> (the model its native route serves, the upstream's events, tool call ids)"""
    responses = upstream_stream(["t0 ", "t1 ", "t2 ", "t3 "], call=True)
    return {
        "responses": (
            "native-responses",
            [e + b"\n\n" for e in responses.split(b"\n\n") if e],
            ("call_1",),
        ),
        "messages": ("native-messages", list(anthropic_stream().chunks), ()),
    }


@pytest.fixture(scope="module")
def native_proxy(cut_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    routes = [
        {
            "name": f"native-{api}",
            "models": [f"native-{api}"],
            "upstream": cut_upstream.url,
            "api": api,
            "timeouts": {"idle": IDLE, "connect": 2},
        }
        for api in ("responses", "messages")
    ]
    config = {
        "server": {"upstream_max_in_flight": 2, "upstream_queue_timeout": 2},
        "routes": routes,
    }
    with running_proxy(config) as proxy:
        yield proxy


NATIVE_FAULTS = ["close", "reset", "partial", "stall", "garbage", "leave", "complete"]


@pytest.mark.parametrize("door", ["responses", "messages"])
@pytest.mark.parametrize("fault", NATIVE_FAULTS)
def test_a_passed_through_stream_cut_short(
    native_proxy: ProxyServer, up: FakeUpstream, logs: Any, door: str, fault: str
) -> None:
    model, events, calls = native_events()[door]
    mid = len(events) // 2
    answer = {
        "close": Stream(events, delay=0.02, done=False, cut_after=mid),
        "reset": Stream(events, delay=0.02, done=False, cut_after=mid, cut="reset"),
        "partial": Stream(events, delay=0.02, done=False, cut_after=mid, cut="partial"),
        "stall": Stream(events, delay=0.02, done=False, hang_after=mid),
        "garbage": Stream(
            [*events[:mid], b"data: {\xff not json\n\n", *events[mid:]], delay=0.02, done=False
        ),
        "leave": Stream(events, delay=0.05, done=False),
        "complete": Stream(events, delay=0.02, done=False),
    }[fault]
    up.script(answer)
    conv = conversation(f"native-{fault}")
    body = {**request_body(door, True), "model": model}
    leave_at = b"t1" if door == "responses" else b"think."
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST", native_proxy.base + PATHS[door], json=body, headers=headers_for(conv)
        ) as r,
    ):
        data = b""
        for raw in r.iter_raw():
            data += raw
            if fault == "leave" and leave_at in data:
                break
        status = r.status_code
    if fault == "leave":
        got = Got("left")
        assert up.disconnected.wait(10), "the upstream connection stayed open"
    else:
        got = judge(door, True, status, data)
        assert got.kind == ("complete" if fault == "complete" else "error"), data
    check_after(native_proxy.base, conv, got, cut=fault != "complete", calls=calls)
