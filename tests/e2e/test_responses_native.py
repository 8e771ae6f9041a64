"""`api: responses` routes end to end: the request passes to the upstream's
own /responses with the reasoning settings applied, and the answer comes
back normalized (tagged reasoning split off) and stored as a turn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.sealing import Sealed, Sealer
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.test_responses_native import (
    BASE,
    NOT_JSON,
    REFUSAL_ORDER,
    TAGGED,
    message,
    refusal_stream,
    upstream_stream,
)

KEY = {"Authorization": "Bearer sk-native"}


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, api="responses")) as server:
        yield server


def sealed(proxy: ProxyServer, text: str, key: str = KEY["Authorization"]) -> str:
    """An envelope this proxy sealed for the tenant of `key` (as its Responses
    door seals the reasoning of answers from a chat route)."""
    rt = proxy.runtime
    return rt.sealer.seal(rt.tenant(key), Sealed(text))


def sdk(proxy: ProxyServer, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.url, api_key="sk-native", max_retries=0, default_headers=headers or None
    )


def test_a_whole_answer_is_normalized_and_stored(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    answer = {**BASE, "status": "completed", "output": [message("<think>Plan.</think>Done.")]}
    upstream.script(Json(answer))
    items: list[Any] = [
        {"role": "user", "content": "Go"},
        {"type": "reasoning", "summary": [], "encrypted_content": sealed(proxy, "Made here.")},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
        {"role": "user", "content": "Again"},
    ]
    with sdk(proxy, **{"X-Reasoning-Effort": "low"}) as client:
        raw = client.responses.with_raw_response.create(
            model="qwen3", input=items, reasoning={"effort": "high"}
        )
    response = raw.parse()
    assert [i.type for i in response.output] == ["reasoning", "message"]
    assert response.output_text == "Done."
    (request,) = upstream.requests
    assert request.path == "/v1/responses"
    sent = request.json
    assert sent["reasoning"] == {"effort": "low"}  # the header wins over the body
    assert len(sent["input"]) == 3  # the proxy's own reasoning item stays home
    assert "messages" not in sent
    conversation = raw.headers["x-conversation-id"]
    stored = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=KEY).json()
    (turn,) = stored["turns"]
    assert turn["content"] == "Done."
    assert [(b["thought"], b["sourceField"]) for b in turn["blocks"]] == [("Plan.", "think_tag")]


def test_a_stream_is_normalized_event_by_event(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    data = upstream_stream(["<think>I sh", "ould greet.</think>He", "llo!"])
    upstream.script(Stream([data], done=False))
    with sdk(proxy) as client, client.responses.stream(model="qwen3", input="Hi") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[1:3] == ["response.output_item.added", "response.reasoning_summary_part.added"]
    assert final.output_text == "Hello!"
    assert final.output[0].type == "reasoning"
    assert final.output[0].summary[0].text == "I should greet."


@pytest.mark.parametrize(
    "header",
    [{"X-Reasoning-Include-In-Response": "false"}, {"X-Reasoning-Output": "none"}],
    ids=["include-false", "output-none"],
)
def test_reasoning_the_settings_hide_streams_no_text(
    proxy: ProxyServer, upstream: FakeUpstream, header: dict[str, str]
) -> None:
    data = upstream_stream(["<think>I sh", "ould greet.</think>He", "llo!"])
    upstream.script(Stream([data], done=False))
    with sdk(proxy, **header) as client, client.responses.stream(model="qwen3", input="Hi") as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert final.output_text == "Hello!"
    assert "response.reasoning_summary_text.delta" not in kinds
    assert all(not getattr(i, "summary", None) for i in final.output)


def test_a_streamed_refusal_keeps_the_upstreams_event_order(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    """Regression: the refusal's deltas, `refusal.done` and `content_part.done`
    came before the message's `output_item.added` and `content_part.added`."""
    upstream.script(Stream([refusal_stream(reasoning_first=True)], done=False))
    with sdk(proxy) as client, client.responses.stream(model="gpt-x", input="Hi") as stream:
        seen = [(e.type, getattr(e, "output_index", None)) for e in stream]
        final = stream.get_final_response()
    message_events = [kind.removeprefix("response.") for kind, index in seen if index == 1]
    assert message_events == REFUSAL_ORDER
    assert seen[1:3] == [("response.output_item.added", 0), ("response.output_item.done", 0)]
    refusal = final.output[1]
    assert refusal.type == "message"
    assert refusal.content[0].type == "refusal"
    assert refusal.content[0].refusal == "I can't help with that."


def test_stored_responses_belong_to_the_native_upstream(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        upstream.script(Json({**BASE, "status": "completed", "output": []}))
        r = httpx.get(f"{proxy.url}/responses/resp_up", headers=KEY)
        upstream.script(Json({"object": "list", "data": [], "has_more": False}))
        listed = httpx.get(f"{proxy.url}/responses/resp_up/input_items?limit=5", headers=KEY)
    assert r.status_code == 200
    assert upstream.requests[0].path == "/v1/responses/resp_up"
    assert listed.json()["object"] == "list"
    assert upstream.requests[1].path == "/v1/responses/resp_up/input_items"


def test_an_upstream_error_keeps_its_status_and_body(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    error = {"error": {"message": "No such model", "type": "invalid_request_error", "code": None}}
    upstream.script(Json(error, status=404))
    r = httpx.post(f"{proxy.url}/responses", json={"model": "x", "input": "y"}, headers=KEY)
    assert r.status_code == 404
    assert r.json() == error


def test_chat_completions_to_a_responses_upstream_is_refused(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(f"{proxy.url}/chat/completions", json=body, headers=KEY)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unsupported_upstream_api"
    assert upstream.requests == []


def test_the_upstream_judges_its_own_continuations(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    # a call output whose call lives in a response the upstream stored: not a 400 here
    upstream.script(Json({**BASE, "status": "completed", "output": [message("18 C.")]}))
    body = {
        "model": "m",
        "previous_response_id": "resp_up",
        "input": [{"type": "function_call_output", "call_id": "call_up", "output": "18"}],
    }
    r = httpx.post(f"{proxy.url}/responses", json=body, headers=KEY)
    assert r.status_code == 200, r.text
    assert upstream.requests[0].json == body


def test_an_event_that_is_not_json_ends_the_stream_failed(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    # it reached the client as a bare `data: {not json`, then response.completed
    at = TAGGED.index(b"event: response.output_text.done")
    upstream.script(Stream([TAGGED[:at], NOT_JSON, TAGGED[at:]], delay=0.05, done=False))
    body = {"model": "qwen3", "input": "Hi", "stream": True}
    r = httpx.post(f"{proxy.url}/responses", json=body, headers=KEY, timeout=30)
    assert r.status_code == 200
    assert b"{not json" not in r.content
    assert b"response.completed" not in r.content
    last = r.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: response.failed\n")
    failed = orjson.loads(last.split(b"data: ", 1)[1])
    assert failed["response"]["error"] == {
        "code": "server_error",
        "message": "The upstream sent an event that is not JSON. (malformed_upstream_event)",
    }
    conversation = r.headers["x-conversation-id"]
    stored = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=KEY).json()
    assert stored["turns"][0]["complete"] is False


# -- an error as the stream's first event gets a real status --------------------------
# (it came back as a 200 with the error event first, and the turn was stored)


def stream_body() -> dict[str, Any]:
    return {"model": "qwen3", "input": "Hi", "stream": True}


def test_an_error_event_first_gets_a_real_status(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None}
    first = b"event: error\ndata: " + orjson.dumps({**error, "sequence_number": 0}) + b"\n\n"
    # a keep-alive comment before it does not end the wait
    upstream.script(Stream([b": keep-alive\n\n", first], delay=0.05, done=False))
    with sdk(proxy) as client, pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="qwen3", input="Hi", stream=True)
    assert caught.value.status_code == 429
    assert caught.value.body == {  # the chat shape, which is the Responses API's
        "message": "Slow down",
        "type": "upstream_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    conversation = caught.value.response.headers["x-conversation-id"]
    stored = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=KEY)
    assert stored.status_code == 404  # no turn: as for an error status


def test_response_failed_first_gets_a_real_status(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    failed = {**BASE, "status": "failed", "output": []}
    failed["error"] = {"code": "server_error", "message": "The model crashed."}
    data = b"event: response.failed\ndata: " + orjson.dumps(
        {"type": "response.failed", "sequence_number": 0, "response": failed}
    )
    upstream.script(Stream([data + b"\n\n"], done=False))
    r = httpx.post(f"{proxy.url}/responses", json=stream_body(), headers=KEY, timeout=30)
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["message"] == "The model crashed."
    assert r.json()["error"]["code"] == "server_error"


def test_a_close_before_any_event_is_a_502(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    upstream.script(Stream([TAGGED], cut_after=0, done=False))
    r = httpx.post(f"{proxy.url}/responses", json=stream_body(), headers=KEY, timeout=30)
    assert r.status_code == 502
    assert r.json()["error"]["code"] in ("upstream_closed", "upstream_disconnected")


def test_an_error_after_the_first_event_stays_an_event(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    created = TAGGED[: TAGGED.index(b"event: response.output_item.added")]
    error = {"type": "error", "code": "server_error", "message": "late", "sequence_number": 1}
    late = b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    upstream.script(Stream([created + late], done=False))  # one read: both at once
    r = httpx.post(f"{proxy.url}/responses", json=stream_body(), headers=KEY, timeout=30)
    assert r.status_code == 200
    assert r.content.startswith(b"event: response.created\n")
    assert b"event: error\n" in r.content


# the ways a route carries its own key: `api_key`, or a credential header
# in `headers:` (the name as the operator wrote it)
ROUTE_KEYS = {
    "api_key": {"api_key": "rk-shared-key-1"},
    "headers Authorization": {"headers": {"Authorization": "Bearer rk-shared-key-1"}},
    "headers api-key": {"headers": {"api-key": "rk-shared-key-1"}},
}


@pytest.mark.parametrize("route_key", ROUTE_KEYS.values(), ids=ROUTE_KEYS.keys())
def test_a_keyed_route_keeps_each_tenants_responses_apart(
    upstream: FakeUpstream, route_key: dict[str, Any]
) -> None:
    """Behind a route key the upstream sees one caller: the proxy serves,
    deletes, lists and continues a response only for the tenant that made
    it; another tenant's id is a 404 (a 400 as a previous id) and nothing
    goes upstream. The maker's own requests pass as before. A key set in
    the route's `headers:` is a route key like `api_key`."""
    alice = {"Authorization": "Bearer sk-alice-native"}
    bob = {"Authorization": "Bearer sk-bob-native"}
    done = {**BASE, "status": "completed", "output": [message("Hi.")]}
    with running_proxy(route_config(upstream, api="responses", **route_key)) as proxy:
        upstream.script(Json(done))
        made = httpx.post(
            f"{proxy.url}/responses", json={"model": "m", "input": "x"}, headers=alice
        )
        assert made.status_code == 200, made.text
        sent = len(upstream.requests)
        foreign = [
            httpx.get(f"{proxy.url}/responses/resp_up", headers=bob),
            httpx.get(f"{proxy.url}/responses/resp_up/input_items", headers=bob),
            httpx.delete(f"{proxy.url}/responses/resp_up"),
            httpx.post(f"{proxy.url}/responses/resp_up/cancel", headers=bob),
            # spelled as an upstream that merges slashes or decodes %2F reads them
            httpx.get(f"{proxy.url}/responses//resp_up", headers=bob),
            httpx.get(f"{proxy.base}/v1//responses/resp_up", headers=bob),
            httpx.get(f"{proxy.url}/responses%2Fresp_up", headers=bob),
        ]
        continued = httpx.post(
            f"{proxy.url}/responses",
            json={"model": "m", "input": "y", "previous_response_id": "resp_up"},
            headers=bob,
        )
        assert len(upstream.requests) == sent  # none of those went upstream
        upstream.script(Json(done), Json({"id": "resp_up", "deleted": True}))
        own = httpx.get(f"{proxy.url}/responses/resp_up", headers=alice)
        deleted = httpx.delete(f"{proxy.url}/responses/resp_up", headers=alice)
        again = httpx.get(f"{proxy.url}/responses/resp_up", headers=alice)
        # the API's own endpoints under /responses/ are not response ids
        upstream.script(Json({"object": "response.input_tokens", "input_tokens": 3}))
        counted = httpx.post(
            f"{proxy.url}/responses/input_tokens", json={"model": "m", "input": "x"}, headers=bob
        )
    assert [r.status_code for r in foreign] == [404] * 7
    assert all(r.json()["error"]["code"] == "response_not_found" for r in foreign)
    assert continued.status_code == 400
    assert continued.json()["error"]["param"] == "previous_response_id"
    assert (own.status_code, deleted.status_code, again.status_code) == (200, 200, 404)
    assert counted.status_code == 200
    assert [r.path for r in upstream.requests[sent:]] == [
        "/v1/responses/resp_up",
        "/v1/responses/resp_up",
        "/v1/responses/input_tokens",
    ]


@pytest.mark.parametrize("route_key", ROUTE_KEYS.values(), ids=ROUTE_KEYS.keys())
def test_a_keyed_route_records_a_streamed_response_before_its_end(
    upstream: FakeUpstream, route_key: dict[str, Any]
) -> None:
    alice = {"Authorization": "Bearer sk-alice-native"}
    events = [e + b"\n\n" for e in upstream_stream(["Hi", "."]).split(b"\n\n") if e]
    done = {**BASE, "status": "completed", "output": [message("Hi.")]}
    with running_proxy(route_config(upstream, api="responses", **route_key)) as proxy:
        upstream.script(Stream(events, done=False))
        made = httpx.post(
            f"{proxy.url}/responses",
            json={"model": "m", "input": "x", "stream": True},
            headers=alice,
        )
        assert made.status_code == 200, made.text
        assert b"response.completed" in made.content
        upstream.script(Json(done))
        own = httpx.get(f"{proxy.url}/responses/resp_up", headers=alice)
        other = httpx.get(f"{proxy.url}/responses/resp_up", headers=KEY)
    assert (own.status_code, other.status_code) == (200, 404)


def test_a_relayed_responses_record_is_no_chain_for_another_route(upstream: FakeUpstream) -> None:
    """The record of who made a response a keyed Responses upstream keeps is
    not a stored Response: continuing it on a Chat route is the same 400 as
    an unknown id, not a request whose earlier context silently vanished."""
    alice = {"Authorization": "Bearer sk-alice-native"}
    routes = {
        "routes": [
            {
                "name": "r",
                "models": ["r-*"],
                "upstream": upstream.url,
                "api": "responses",
                "api_key": "rk-shared-key-1",
            },
            {"name": "chat", "models": ["*"], "upstream": upstream.url},
        ]
    }
    with running_proxy(routes) as proxy:
        upstream.script(Json({**BASE, "status": "completed", "output": [message("Hi.")]}))
        made = httpx.post(
            f"{proxy.url}/responses", json={"model": "r-1", "input": "x"}, headers=alice
        )
        assert made.status_code == 200, made.text
        continued = httpx.post(
            f"{proxy.url}/responses",
            json={"model": "m", "input": "y", "previous_response_id": "resp_up"},
            headers=alice,
        )
    assert continued.status_code == 400
    assert continued.json()["error"]["code"] == "previous_response_not_found"


CREATED = TAGGED[: TAGGED.index(b"event: response.output_item.added")]


def created_then(proxy: ProxyServer, upstream: FakeUpstream, bad: bytes) -> bytes:
    """`response.created` and `bad` in one read: the `response.failed`
    event that ends what the client gets, after the created one."""
    upstream.script(Stream([CREATED + bad], done=False))
    r = httpx.post(f"{proxy.url}/responses", json=stream_body(), headers=KEY, timeout=30)
    assert r.status_code == 200
    assert r.content.startswith(b"event: response.created\n")
    last = r.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: response.failed\n")
    return last


def test_a_malformed_event_in_the_first_read_after_a_good_one_is_an_event(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    """The good event and the broken one in one read: the client gets the
    good one, then `response.failed`, as when they come apart; not a 502
    that drops what the upstream already answered."""
    assert b"malformed_upstream_event" in created_then(proxy, upstream, NOT_JSON)


def test_an_over_long_line_after_a_good_event_in_the_same_read_keeps_that_event(
    upstream: FakeUpstream,
) -> None:
    long = b"event: response.output_text.delta\ndata: " + b'{"x": "' + b"y" * 5000 + b'"}\n\n'
    config = route_config(upstream, api="responses", top={"limits": {"max_sse_line_bytes": 1024}})
    with running_proxy(config) as proxy:
        assert b"upstream_line_too_long" in created_then(proxy, upstream, long)


@pytest.mark.parametrize("path", ["/responses/input_tokens", "/responses/compact"])
def test_the_endpoints_beside_responses_leave_the_proxys_own_items_home(
    proxy: ProxyServer, upstream: FakeUpstream, path: str
) -> None:
    """input_tokens and compact pass to a Responses upstream as /responses
    would: a reasoning item this proxy made (its envelope no upstream can
    open) is left out, the upstream's own items go as they came, and so does
    an envelope another reasoning-proxy made (an upstream that is one)."""
    own = {"type": "reasoning", "summary": [], "encrypted_content": sealed(proxy, "Here.")}
    theirs = {"type": "reasoning", "summary": [], "encrypted_content": "gAAA-upstream-blob"}
    other = Sealer(b"another proxy's secret").seal("its tenant", Sealed("There."))
    chained = {"type": "reasoning", "summary": [], "encrypted_content": other}
    items: list[Any] = [
        {"role": "user", "content": "Go"},
        own,
        theirs,
        chained,
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
        {"role": "user", "content": "Again"},
    ]
    upstream.script(Json({"object": "response.input_tokens", "input_tokens": 9}))
    r = httpx.post(
        f"{proxy.url}{path}", json={"model": "m", "input": items}, headers=KEY, timeout=30
    )
    assert r.status_code == 200
    (request,) = upstream.requests
    assert request.path == "/v1" + path
    assert request.json["input"] == [items[0], theirs, chained, *items[4:]]
    assert request.json["model"] == "m"


def test_a_body_without_the_proxys_items_passes_byte_for_byte(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    raw = b'{"model": "m",   "input": [{"role": "user", "content": "x"}]}'
    upstream.script(Json({"object": "response.input_tokens", "input_tokens": 2}))
    r = httpx.post(
        f"{proxy.url}/responses/input_tokens",
        content=raw,
        headers={**KEY, "content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200
    (request,) = upstream.requests
    assert request.body == raw
