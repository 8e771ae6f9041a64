"""A Responses upstream's stream (`api: responses`) cut short, by the
upstream or by the client, stores the turn with `complete: false` and what
the client was sent of it: the answer text, the reasoning summary (also
reasoning split off `<think>` tags), not an empty turn."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Stream, running_proxy
from tests.stores.servers import wait_until

KEY = {"Authorization": "Bearer sk-native-cut"}
BASE = {"id": "resp_up1", "object": "response", "created_at": 1, "model": "m", "output": []}


def event(kind: str, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


def started(reasoning: list[str], text: list[str]) -> list[bytes]:
    """A response's events up to its answer's last delta; no item is done."""
    out = [event("response.created", response={**BASE, "status": "in_progress"})]
    at = 0
    if reasoning:
        item = {"id": "rs_up1", "type": "reasoning", "summary": []}
        out.append(event("response.output_item.added", output_index=0, item=item))
        part = {"type": "summary_text", "text": ""}
        where = {"item_id": "rs_up1", "output_index": 0, "summary_index": 0}
        out.append(event("response.reasoning_summary_part.added", **where, part=part))
        for piece in reasoning:
            out.append(event("response.reasoning_summary_text.delta", **where, delta=piece))
        at = 1
    msg = {"id": "msg_up1", "type": "message", "role": "assistant", "status": "in_progress"}
    out.append(event("response.output_item.added", output_index=at, item={**msg, "content": []}))
    where = {"item_id": "msg_up1", "output_index": at, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    out.append(event("response.content_part.added", **where, part=part))
    for piece in text:
        out.append(event("response.output_text.delta", **where, delta=piece, logprobs=[]))
    return out


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def proxy_url(upstream: FakeUpstream) -> Iterator[str]:
    route = {"name": "native", "models": ["*"], "upstream": upstream.url, "api": "responses"}
    with running_proxy({"routes": [route]}) as proxy:
        yield proxy.base


def stored(base: str, conversation: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/v1/conversations/{conversation}", headers=KEY)
    if r.status_code != 200:
        return []
    turns: list[dict[str, Any]] = r.json()["turns"]
    return turns


def post(base: str, conversation: str) -> httpx.Response:
    headers = {**KEY, "X-Conversation-Id": conversation}
    body = {"model": "m", "stream": True, "input": "hi"}
    return httpx.post(base + "/v1/responses", json=body, headers=headers, timeout=20)


def test_an_upstream_cut_keeps_the_answer_and_reasoning_sent(
    upstream: FakeUpstream, proxy_url: str
) -> None:
    upstream.reset()
    events = started(["weighing ", "options"], ["Hello", " world"])
    upstream.script(Stream(events, done=False, cut_after=len(events)))
    r = post(proxy_url, "native-cut-upstream")
    assert r.status_code == 200
    assert "event: response.failed" in r.text
    (turn,) = stored(proxy_url, "native-cut-upstream")
    assert turn["complete"] is False
    assert turn["content"] == "Hello world"
    assert [b["thought"] for b in turn["blocks"]] == ["weighing options"]


def test_reasoning_split_off_tags_is_kept_when_cut(upstream: FakeUpstream, proxy_url: str) -> None:
    upstream.reset()
    events = started([], ["<think>pondering", " more</thi"])
    upstream.script(Stream(events, done=False, cut_after=len(events)))
    r = post(proxy_url, "native-cut-tags")
    assert "response.reasoning_summary_text.delta" in r.text
    (turn,) = stored(proxy_url, "native-cut-tags")
    assert turn["complete"] is False
    assert turn["content"] == ""
    assert [(b["thought"], b["sourceField"]) for b in turn["blocks"]] == [
        ("pondering more", "think_tag")
    ]


def test_a_client_that_leaves_keeps_what_it_was_sent(
    upstream: FakeUpstream, proxy_url: str
) -> None:
    upstream.reset()
    events = started(["thinking"], ["partial answer"])
    upstream.script(Stream(events, done=False, hang_after=len(events)))
    port = int(proxy_url.rsplit(":", 1)[1])
    body = json.dumps({"model": "m", "stream": True, "input": "hi"}).encode()
    head = (
        "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: {KEY['Authorization']}\r\nX-Conversation-Id: native-cut-client\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + body)
        got = b""
        while b"partial answer" not in got:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the stream"
            got += chunk
    wait_until(lambda: bool(stored(proxy_url, "native-cut-client")), what="the stored turn")
    (turn,) = stored(proxy_url, "native-cut-client")
    assert turn["complete"] is False
    assert turn["content"] == "partial answer"
    assert [b["thought"] for b in turn["blocks"]] == ["thinking"]


def test_a_whole_stream_is_stored_as_before(upstream: FakeUpstream, proxy_url: str) -> None:
    upstream.reset()
    events = started(["why"], ["Done"])
    msg = {"id": "msg_up1", "type": "message", "role": "assistant", "status": "completed"}
    text = {"type": "output_text", "text": "Done", "annotations": []}
    reasoning = {
        "id": "rs_up1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "why"}],
    }
    events += [
        event("response.output_item.done", output_index=0, item=reasoning),
        event("response.output_item.done", output_index=1, item={**msg, "content": [text]}),
        event(
            "response.completed",
            response={**BASE, "status": "completed", "output": [reasoning, msg]},
        ),
    ]
    upstream.script(Stream(events, done=False))
    r = post(proxy_url, "native-whole")
    assert "response.completed" in r.text
    (turn,) = stored(proxy_url, "native-whole")
    assert turn["complete"] is True
    assert turn["content"] == "Done"
    assert [b["thought"] for b in turn["blocks"]] == ["why"]


def test_a_tool_call_cut_keeps_its_arguments_so_far(upstream: FakeUpstream, proxy_url: str) -> None:
    upstream.reset()
    call = {
        "id": "fc_up1",
        "type": "function_call",
        "call_id": "call_up1",
        "name": "lookup",
        "arguments": "",
        "status": "in_progress",
    }
    events = [
        event("response.created", response={**BASE, "status": "in_progress"}),
        event("response.output_item.added", output_index=0, item=call),
        event(
            "response.function_call_arguments.delta",
            item_id="fc_up1",
            output_index=0,
            delta='{"q": "ab',
        ),
    ]
    upstream.script(Stream(events, done=False, cut_after=len(events)))
    r = post(proxy_url, "native-cut-call")
    assert "event: response.failed" in r.text
    (turn,) = stored(proxy_url, "native-cut-call")
    assert turn["complete"] is False
    assert turn["toolCalls"] == [{"id": "call_up1", "name": "lookup", "arguments": '{"q": "ab'}]
