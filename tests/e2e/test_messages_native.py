"""The Messages door to a Messages upstream (`api: messages`): the request
passes through with the reasoning settings applied, thinking signatures are
sealed on the way out and the upstream's own come back, the turn is stored."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import httpx
import orjson
import pytest

import proxy.api.messages
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.messages_wire import accumulate, parse_events, sdk_client

KEY = "sk-ant-client"


def client(base: str, api_key: str = KEY) -> anthropic.Anthropic:
    """An SDK client, closed when the test ends."""
    return sdk_client(base, api_key)


def ev(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


def anthropic_stream(signature: str = "upstream-sig-1") -> Stream:
    message = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 1},
    }
    return Stream(
        [
            ev("message_start", {"message": message}),
            ev(
                "content_block_start",
                {
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            ),
            ev(
                "content_block_delta",
                {"index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}},
            ),
            ev(
                "content_block_delta",
                {"index": 0, "delta": {"type": "thinking_delta", "thinking": "think."}},
            ),
            ev(
                "content_block_delta",
                {"index": 0, "delta": {"type": "signature_delta", "signature": signature}},
            ),
            ev("content_block_stop", {"index": 0}),
            b'event: ping\ndata: {"type": "ping"}\n\n',
            ev("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
            ev(
                "content_block_delta",
                {"index": 1, "delta": {"type": "text_delta", "text": "Hello."}},
            ),
            ev("content_block_stop", {"index": 1}),
            ev(
                "message_delta",
                {
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 9},
                },
            ),
            ev("message_stop", {}),
        ],
        done=False,
    )


def whole_message(signature: str = "upstream-sig-2") -> dict[str, Any]:
    return {
        "id": "msg_up2",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [
            {"type": "thinking", "thinking": "Whole thought.", "signature": signature},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 6},
    }


def native(upstream: FakeUpstream, **route: Any) -> dict[str, Any]:
    return route_config(upstream, api="messages", **route)


def messages_requests(upstream: FakeUpstream) -> list[Any]:
    return [r for r in upstream.requests if r.path == "/v1/messages"]


def test_a_stream_passes_through_with_sealed_signatures(upstream: FakeUpstream) -> None:
    upstream.script(anthropic_stream())
    body = {
        "model": "claude-up",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
        "context_management": {"edits": []},
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "b1"}
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers=headers, timeout=30)
        conversation = r.headers["x-conversation-id"]
        stored = httpx.get(
            f"{proxy.url}/conversations/{conversation}",
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert r.status_code == 200
    events = parse_events(r.content)
    message = accumulate(events)
    thinking, text = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "Let me think."
    assert thinking.signature.startswith("rp1.")
    assert "upstream-sig-1" not in r.text
    assert text.type == "text"
    assert text.text == "Hello."
    assert message.usage.output_tokens == 9
    sent = messages_requests(upstream)[0]
    assert sent.json == body  # passed through as it came
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-beta"] == "b1"
    assert "authorization" not in sent.headers
    # stored: the upstream's own signature, for the way back
    assert stored.status_code == 200, stored.text
    turn = stored.json()["turns"][0]
    assert turn["blocks"][0]["thought"] == "Let me think."
    assert turn["blocks"][0]["signature"] == "upstream-sig-1"
    assert turn["content"] == "Hello."
    assert turn["finishReason"] == "stop"


def test_the_upstream_gets_back_exactly_what_it_issued(upstream: FakeUpstream) -> None:
    upstream.script(Json(whole_message()), Json(whole_message("sig-3")))
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with running_proxy(native(upstream)) as proxy:
        first = client(proxy.base).messages.create(
            model="claude-up", max_tokens=100, messages=question
        )  # type: ignore[arg-type]
        assert first.content[0].type == "thinking"
        assert first.content[0].signature.startswith("rp1.")
        forged = {"type": "thinking", "thinking": "forged", "signature": "rp1.AAAA"}
        history = [
            *question,
            {"role": "assistant", "content": [forged, *(b.model_dump() for b in first.content)]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}],
            },
        ]
        client(proxy.base).messages.create(model="claude-up", max_tokens=100, messages=history)  # type: ignore[arg-type]
    sent = messages_requests(upstream)[1].json["messages"][1]["content"]
    assert sent[0] == {
        "type": "thinking",
        "thinking": "Whole thought.",
        "signature": "upstream-sig-2",
    }
    assert sent[1]["type"] == "tool_use"
    assert len(sent) == 2  # the forged block is left out


def test_the_upstreams_own_signature_goes_back_as_it_came(upstream: FakeUpstream) -> None:
    """A session begun without the proxy (Claude Code against Anthropic, then
    through the proxy): its thinking blocks carry Anthropic's own signatures,
    not envelopes. Left out, the tool-use turn would lack its thinking, which
    Anthropic refuses; the upstream checks its own signature."""
    upstream.script(Json(whole_message()))
    own = {"type": "thinking", "thinking": "Check Oslo.", "signature": "EqQBCkYIBhgCKkD"}
    history = [
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": [
                own,
                {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "cold"}],
        },
    ]
    with running_proxy(native(upstream)) as proxy:
        client(proxy.base).messages.create(model="claude-up", max_tokens=100, messages=history)  # type: ignore[arg-type]
        rejected = httpx.get(f"{proxy.url.removesuffix('/v1')}/metrics").text
    sent = messages_requests(upstream)[0].json["messages"][1]["content"]
    assert sent[0] == own
    assert 'reasoning_proxy_sealed_rejected_total{door="messages"}' not in rejected


def test_settings_become_messages_parameters(upstream: FakeUpstream) -> None:
    upstream.script(Json(whole_message()), Json(whole_message()))
    body = {
        "model": "claude-up",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "x"}],
        "thinking": {"type": "enabled", "budget_tokens": 2000},
    }
    config = native(upstream, reasoning={"effort": "high"})
    with running_proxy(config) as proxy:
        httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        httpx.post(
            f"{proxy.url}/messages",
            json=body,
            headers={"x-api-key": KEY, "X-Reasoning-Enabled": "false"},
            timeout=30,
        )
    first, second = (r.json for r in messages_requests(upstream))
    # the route's effort where the body has none; the body's own thinking kept
    assert first["output_config"] == {"effort": "high"}
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    # a header overrides the body
    assert second["thinking"] == {"type": "disabled"}


# -- include-in-response false (or output none): no reasoning text reaches the client -----
# (the thinking text passed through, streamed and whole)

HIDING: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "include-false": ({"X-Reasoning-Include-In-Response": "false"}, {}),
    "output-none": ({"X-Reasoning-Output": "none"}, {}),
    "route": ({}, {"reasoning": {"include_in_response": False}}),
    "profile": (
        {"X-Reasoning-Profile": "quiet"},
        {"top": {"profiles": {"quiet": {"include_in_response": False}}}},
    ),
}


@pytest.mark.parametrize(("headers", "route"), HIDING.values(), ids=HIDING.keys())
def test_hidden_thinking_streams_an_empty_block_with_its_envelope(
    upstream: FakeUpstream, headers: dict[str, str], route: dict[str, Any]
) -> None:
    upstream.script(anthropic_stream())
    question = [{"role": "user", "content": "hello"}]
    with running_proxy(native(upstream, **route)) as proxy:
        with client(proxy.base).messages.stream(
            model="claude-up",
            max_tokens=100,
            messages=question,  # type: ignore[arg-type]
            extra_headers=headers,
        ) as stream:
            seen = [e.model_dump_json() for e in stream]
            final = stream.get_final_message()
        answer = stream.response
        stored = httpx.get(
            f"{proxy.url}/conversations/{answer.headers['x-conversation-id']}",
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()
    assert not any("think." in e or "Let me" in e for e in seen)
    thinking, text = final.content
    assert thinking.type == "thinking"
    assert thinking.thinking == ""
    assert thinking.signature.startswith("rp1.")
    assert text.type == "text"
    assert text.text == "Hello."
    assert "x-reasoning-ignored" not in answer.headers  # honoured
    # the stored turn keeps the thinking, with the upstream's signature
    assert stored["turns"][0]["blocks"][0]["thought"] == "Let me think."
    assert stored["turns"][0]["blocks"][0]["signature"] == "upstream-sig-1"


@pytest.mark.parametrize(("headers", "route"), HIDING.values(), ids=HIDING.keys())
def test_hidden_thinking_comes_whole_as_an_empty_block_and_goes_back_in_full(
    upstream: FakeUpstream, headers: dict[str, str], route: dict[str, Any]
) -> None:
    """The client's tool loop sends the empty block back; the upstream gets
    the thinking text and signature it issued, from the envelope."""
    upstream.script(Json(whole_message()), Json(whole_message("sig-3")))
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with running_proxy(native(upstream, **route)) as proxy:
        sdk = client(proxy.base)
        raw = sdk.messages.with_raw_response.create(
            model="claude-up",
            max_tokens=100,
            messages=question,  # type: ignore[arg-type]
            extra_headers=headers,
        )
        first = raw.parse()
        history = [
            *question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}],
            },
        ]
        sdk.messages.create(
            model="claude-up",
            max_tokens=100,
            messages=history,  # type: ignore[arg-type]
            extra_headers=headers,
        )
    assert "Whole thought" not in raw.http_response.text
    assert "x-reasoning-ignored" not in raw.headers
    thinking = first.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking == ""
    assert thinking.signature.startswith("rp1.")
    sent = messages_requests(upstream)[1].json["messages"][1]["content"]
    assert sent[0] == {
        "type": "thinking",
        "thinking": "Whole thought.",
        "signature": "upstream-sig-2",
    }


@pytest.mark.parametrize(
    "key",
    [{"api_key": "sk-route"}, {"headers": {"X-Api-Key": "sk-route"}}],
    ids=["api_key", "headers"],
)
def test_a_route_key_is_sent_as_x_api_key_alone(
    upstream: FakeUpstream, key: dict[str, Any]
) -> None:
    upstream.script(Json(whole_message()))
    with running_proxy(native(upstream, **key)) as proxy:
        httpx.post(
            f"{proxy.url}/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            headers={
                "Authorization": f"Bearer {KEY}",
                "api-key": "sk-client-b",
                "x-goog-api-key": "sk-client-c",
                "Cookie": "session=sk-client-d",
            },
            timeout=30,
        )
    sent = messages_requests(upstream)[0]
    assert sent.headers.getall("x-api-key") == ["sk-route"]
    for name in ("authorization", "api-key", "x-goog-api-key", "cookie"):
        assert name not in sent.headers, name
    assert sent.headers["anthropic-version"] == "2023-06-01"


def test_upstream_errors_pass_with_their_status(upstream: FakeUpstream) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.script(Json({**error, "request_id": "req_011CS"}, status=529))
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            headers={"x-api-key": KEY},
            timeout=30,
        )
    assert r.status_code == 529
    assert r.json() == {**error, "request_id": "req_011CS"}  # the body as it came


def test_a_stream_cut_short_ends_with_an_error_event_and_an_incomplete_turn(
    upstream: FakeUpstream,
) -> None:
    stream = anthropic_stream()
    stream.cut_after = 4
    upstream.script(stream)
    body = {
        "model": "m",
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}",
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()
    events = parse_events(r.content)
    assert events[-1][0] == "error"
    assert stored["turns"][0]["complete"] is False
    assert stored["turns"][0]["blocks"][0]["thought"] == "Let me think."


def test_a_client_that_drops_thinking_gets_it_from_the_store(upstream: FakeUpstream) -> None:
    upstream.script(Json(whole_message("sig-stored")), Json(whole_message()))
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with running_proxy(native(upstream)) as proxy:
        first = client(proxy.base).messages.create(
            model="claude-up", max_tokens=100, messages=question
        )  # type: ignore[arg-type]
        history = [
            *question,
            {
                "role": "assistant",
                "content": [b.model_dump() for b in first.content if b.type != "thinking"],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}],
            },
        ]
        client(proxy.base).messages.create(model="claude-up", max_tokens=100, messages=history)  # type: ignore[arg-type]
    sent = messages_requests(upstream)[1].json["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": "Whole thought.", "signature": "sig-stored"}
    assert sent[1]["type"] == "tool_use"


def test_an_idle_timeout_mid_stream_is_a_timeout_error(upstream: FakeUpstream) -> None:
    # it said api_error; the chat-upstream path says timeout_error
    stream = anthropic_stream()
    stream.hang_after = 3
    upstream.script(stream)
    body = {
        "model": "m",
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with running_proxy(native(upstream, timeouts={"idle": 0.5})) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
    name, error = parse_events(r.content)[-1]
    assert name == "error"
    assert error["error"]["type"] == "timeout_error"
    assert (
        error["error"]["message"]
        == "The upstream sent nothing within the route's idle timeout (timeouts.idle)."
    )


# -- an error as the stream's first event gets a real status --------------------------
# (it came back as a 200 with the error event first)


def stream_body() -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }


def test_an_error_event_first_gets_a_real_status(upstream: FakeUpstream) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down"}}
    # a ping (Messages' keep-alive) before it does not end the wait
    upstream.script(
        Stream(
            [ev("ping", {}), b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"],
            delay=0.05,
            done=False,
        )
    )
    with running_proxy(native(upstream)) as proxy:
        with pytest.raises(anthropic.RateLimitError) as caught:
            client(proxy.base).messages.create(**stream_body())  # type: ignore[call-overload]
        conversation = caught.value.response.headers["x-conversation-id"]
        stored = httpx.get(
            f"{proxy.url}/conversations/{conversation}",
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert caught.value.status_code == 429
    assert caught.value.body == error  # Anthropic's shape
    assert stored.status_code == 404  # no turn: as for an error status


def test_an_overloaded_error_first_is_a_503_overloaded_error(upstream: FakeUpstream) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.script(Stream([b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"], done=False))
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages", json=stream_body(), headers={"x-api-key": KEY}, timeout=30
        )
    assert r.status_code == 503
    assert r.json() == error


def test_a_close_before_any_event_is_a_502(upstream: FakeUpstream) -> None:
    stream = anthropic_stream()
    stream.cut_after = 0
    upstream.script(stream)
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages", json=stream_body(), headers={"x-api-key": KEY}, timeout=30
        )
    assert r.status_code == 502
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "api_error"


def test_a_last_event_without_its_blank_line_still_ends_the_stream(
    upstream: FakeUpstream,
) -> None:
    """An upstream that closes right after `message_stop`'s data line (no blank
    line): the event counts, the stream ends well and the turn is complete."""
    events = anthropic_stream().chunks
    last = events[-1]
    assert isinstance(last, bytes)
    upstream.script(Stream([*events[:-1], last.rstrip(b"\n")], done=False))
    body = {**stream_body(), "model": "claude-up"}
    with running_proxy(native(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}",
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()
    names = [name for name, _ in parse_events(r.content)]
    assert names[-1] == "message_stop"
    assert "error" not in names
    assert stored["turns"][0]["complete"] is True


MESSAGE_START = ev(
    "message_start",
    {
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-up",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 0},
        }
    },
)


def start_then(upstream: FakeUpstream, bad: bytes, **route: Any) -> list[Any]:
    """`message_start` and `bad` in one read: the events the client gets."""
    upstream.script(Stream([MESSAGE_START + bad], done=False))
    with running_proxy(native(upstream, **route)) as proxy:
        r = httpx.post(
            f"{proxy.url}/messages", json=stream_body(), headers={"x-api-key": KEY}, timeout=30
        )
    assert r.status_code == 200
    events = parse_events(r.content)
    assert events[0][0] == "message_start"
    assert events[-1][0] == "error"
    return events


def test_a_malformed_event_in_the_first_read_after_a_good_one_is_an_event(
    upstream: FakeUpstream,
) -> None:
    """`message_start` and a broken event in one read: the client gets the
    start, then an error event, as when they come apart; not a 502 that
    drops what the upstream already answered."""
    start_then(upstream, b"event: content_block_start\ndata: {not json\n\n")


def test_an_over_long_line_after_a_good_event_in_the_same_read_keeps_that_event(
    upstream: FakeUpstream,
) -> None:
    long = ev("ping", {"pad": "z" * 5000})
    events = start_then(upstream, long, top={"limits": {"max_sse_line_bytes": 1024}})
    assert events[-1][1]["error"] == {
        "type": "api_error",
        "message": "The upstream sent an SSE line or event longer than "
        "limits.max_sse_line_bytes (1024 bytes).",
    }


def count_x(proxy: ProxyServer) -> httpx.Response:
    """A count of one short user message, with the client's key."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(
        f"{proxy.url}/messages/count_tokens", json=body, headers={"x-api-key": KEY}, timeout=30
    )


def count_requests(upstream: FakeUpstream) -> list[Any]:
    return [r for r in upstream.requests if r.path == "/v1/messages/count_tokens"]


def test_count_tokens_is_the_upstreams_own_count_of_what_the_door_would_send(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """The count goes to the upstream's count_tokens as the request would go
    to its /messages: signatures opened to the upstream's own, the thinking a
    client dropped restored from the store, the route's key alone, and only
    the fields count_tokens takes."""
    caplog.set_level(logging.INFO, logger="proxy.request")
    upstream.script(Json(whole_message("sig-stored")), Json({"input_tokens": 4321}))
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with running_proxy(native(upstream, api_key="sk-route")) as proxy:
        sdk = client(proxy.base)
        first = sdk.messages.create(model="claude-up", max_tokens=100, messages=question)  # type: ignore[arg-type]
        history = [
            *question,
            {
                "role": "assistant",
                "content": [b.model_dump() for b in first.content if b.type != "thinking"],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}],
            },
        ]
        counted = sdk.messages.count_tokens(
            model="claude-up",
            messages=history,  # type: ignore[arg-type]
            system="Be brief.",
            thinking={"type": "enabled", "budget_tokens": 2000},
        )
    assert counted.input_tokens == 4321
    logged = [r for r in caplog.records if r.name == "proxy.request"]
    assert [getattr(r, "counted_by", None) for r in logged] == [None, "upstream"]
    [sent] = count_requests(upstream)
    assert sent.method == "POST"
    assert sent.headers.getall("x-api-key") == ["sk-route"]
    assert "authorization" not in sent.headers
    assert "anthropic-version" in sent.headers  # the SDK's, passed on
    assert set(sent.json) == {"model", "messages", "system", "thinking"}
    assert sent.json["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assistant = sent.json["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "Whole thought.",
        "signature": "sig-stored",
    }
    assert assistant[1]["type"] == "tool_use"
    assert len(messages_requests(upstream)) == 1  # the count made no message


def test_count_tokens_opens_the_clients_signatures_and_drops_create_only_fields(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(whole_message()), Json({"input_tokens": 77}))
    question = [{"role": "user", "content": "weather in Oslo?"}]
    with running_proxy(native(upstream, reasoning={"effort": "high"})) as proxy:
        first = client(proxy.base).messages.create(
            model="claude-up", max_tokens=100, messages=question
        )  # type: ignore[arg-type]
        body = {
            "model": "claude-up",
            "max_tokens": 100,  # not count_tokens': Anthropic refuses it there
            "stream": True,
            "temperature": 0.5,
            "messages": [
                *question,
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}
                    ],
                },
            ],
        }
        r = httpx.post(
            f"{proxy.url}/messages/count_tokens", json=body, headers={"x-api-key": KEY}, timeout=30
        )
    assert r.status_code == 200
    assert r.json() == {"input_tokens": 77}
    [sent] = count_requests(upstream)
    assert sent.headers["x-api-key"] == KEY  # a route without a key: the client's
    assert set(sent.json) == {"model", "messages", "output_config"}
    assert sent.json["output_config"] == {"effort": "high"}  # the route's setting, applied
    thinking = sent.json["messages"][1]["content"][0]
    assert thinking == {
        "type": "thinking",
        "thinking": "Whole thought.",
        "signature": "upstream-sig-2",
    }


@pytest.mark.parametrize("status", [404, 405, 501])
def test_count_tokens_falls_back_to_the_proxys_count_without_the_endpoint(
    upstream: FakeUpstream, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")
    missing = {"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}
    upstream.script(Json(missing, status=status), Json(missing, status=status))
    with running_proxy(native(upstream)) as proxy:
        sdk = client(proxy.base)
        short = sdk.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        long = sdk.messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "hi " * 200}]
        )
    assert 0 < short.input_tokens < 20
    assert long.input_tokens > short.input_tokens + 150
    # the second count is the proxy's without asking (NO_COUNT_MEMO)
    assert len(count_requests(upstream)) == 1
    assert messages_requests(upstream) == []
    logged = [r for r in caplog.records if r.name == "proxy.request"]
    assert [getattr(r, "counted_by", None) for r in logged] == ["proxy", "proxy"]


def test_a_route_without_count_tokens_is_asked_again_after_the_memo(
    upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy.api.messages, "NO_COUNT_MEMO", 0.0)
    missing = {"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}
    upstream.script(Json(missing, status=404), Json({"input_tokens": 42}))
    with running_proxy(native(upstream)) as server:
        first, second = count_x(server), count_x(server)
    assert first.json()["input_tokens"] < 20  # the proxy's
    assert second.json() == {"input_tokens": 42}  # the upstream's, asked again
    assert len(count_requests(upstream)) == 2


def test_count_tokens_errors_pass_with_their_status_and_the_route_key_masked(
    upstream: FakeUpstream,
) -> None:
    quoted = {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "sk-route-0123 slow"},
    }
    upstream.script(Json(quoted, status=429, headers={"retry-after": "7"}))
    with running_proxy(native(upstream, api_key="sk-route-0123")) as proxy:
        r = count_x(proxy)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert "sk-route-0123" not in r.text


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"input_tokens": "12"}',
        b"[]",
        b"",
        orjson.dumps(whole_message()),  # a server that answers every path as /messages
    ],
    ids=["not-json", "string-count", "list", "empty", "a-message"],
)
def test_an_answer_without_a_count_gets_the_proxys_count(
    upstream: FakeUpstream, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")
    upstream.script(Json(body))
    with running_proxy(native(upstream)) as proxy:
        r = count_x(proxy)
    assert r.status_code == 200
    assert 0 < r.json()["input_tokens"] < 20
    assert len(count_requests(upstream)) == 1
    logged = [r for r in caplog.records if r.name == "proxy.request"]
    assert [getattr(r, "counted_by", None) for r in logged] == ["proxy"]
