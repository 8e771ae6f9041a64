"""Keys stay in their lane, tried from outside through real sockets: a route
key (in `api_key` or a credential header) that the upstream quotes back in
the spellings its encoders write (as is, JSON-escaped, percent-encoded, split
across reads) reaches no client, no stored turn and no log line; the
client's own credentials never go to a keyed route's upstream, and a body
logged with `log_bodies` does not carry the caller's key."""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import anthropic
import httpx
import openai
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

# a base64-style key, as in a route's `Authorization: Basic ...` header: its
# `/`, `+` and `=` change when an upstream JSON-escapes or URL-encodes it
ROUTE_KEY = "rk/Lane+Route=0123456789abcdef"
SPELLINGS = {
    "as is": ROUTE_KEY,
    "json slash": ROUTE_KEY.replace("/", "\\/"),  # PHP's json_encode
    "percent": quote(ROUTE_KEY, safe=""),
    "percent lower": re.sub("%..", lambda m: m.group(0).lower(), quote(ROUTE_KEY, safe="")),
    "path": quote(ROUTE_KEY, safe="/"),
    "form": quote_plus(ROUTE_KEY),
}
CLIENT_KEY = "lane0client0credential42"  # no known key prefix: only the proxy knows it
CLIENT = {"Authorization": f"Bearer {CLIENT_KEY}"}
MESSAGES = [{"role": "user", "content": "hi"}]


def refusal(spelling: str) -> bytes:
    # written by hand, as the upstream's encoder wrote it (escapes kept)
    text = f"Incorrect API key provided: {spelling}. See https://x.example/k?key={spelling}"
    return b'{"error":{"message":"' + text.encode() + b'","type":"invalid_request_error"}}'


def leaked(text: str) -> list[str]:
    return [name for name, form in SPELLINGS.items() if form in text]


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_route_key_quoted_in_any_spelling_reaches_no_client(
    upstream: FakeUpstream, spelling: str
) -> None:
    """Regression: the key was masked only as written, so a 401 that quoted
    it JSON-escaped (`rk\\/...`) or percent-encoded (`rk%2F...`) handed the
    route's key to every client, on every door and the pass-through."""
    form = SPELLINGS[spelling]
    # the route key in a credential header of the route's own (`headers:`)
    config = route_config(upstream, headers={"Authorization": f"Basic {ROUTE_KEY}"})
    with running_proxy(config) as proxy:
        seen: list[str] = []
        for _ in range(4):
            upstream.script(Json(refusal(form), status=401, headers={"x-upstream-echo": form}))
        chat = openai.OpenAI(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as raised:
            chat.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        seen += [
            str(raised.value),
            json.dumps(raised.value.body),
            str(raised.value.response.headers),
        ]
        with pytest.raises(openai.AuthenticationError) as raised:
            chat.responses.create(model="m", input="hi")
        seen += [str(raised.value), json.dumps(raised.value.body)]
        messages = anthropic.Anthropic(base_url=proxy.base, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as shown:
            messages.messages.create(model="m", max_tokens=16, messages=MESSAGES)  # type: ignore[arg-type]
        seen += [str(shown.value), json.dumps(shown.value.body)]
        passed = httpx.get(f"{proxy.url}/models", headers=CLIENT)
        seen += [passed.text, str(passed.headers)]
        assert passed.status_code == 401
        chat.close()
    assert [r.headers["authorization"] for r in upstream.requests] == [f"Basic {ROUTE_KEY}"] * 4
    assert not [n for n, text in enumerate(seen) if leaked(text)], seen
    assert "[REDACTED]" in seen[0]


def split_stream(form: str) -> Stream:
    cut = len(form) // 2
    return Stream(
        [
            chunk({"reasoning_content": f"the link had key={form[:cut]}"}),
            chunk({"reasoning_content": f"{form[cut:]} in it"}),
            chunk({"content": f"see ?key={form[:5]}"}),
            chunk({"content": f"{form[5:]}"}),
            chunk({}, "stop"),
        ],
        delay=0.05,  # each chunk its own read
    )


def streamed(proxy_url: str, conversation: str) -> tuple[str, str]:
    """The raw event stream, and the texts its deltas add up to."""
    with httpx.stream(
        "POST",
        f"{proxy_url}/chat/completions",
        headers={**CLIENT, "X-Conversation-Id": conversation},
        json={"model": "m", "stream": True, "messages": MESSAGES},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        wire = b"".join(response.iter_raw()).decode()
    texts = "".join(
        (json.loads(line[6:])["choices"][0]["delta"].get(kind) or "")
        for line in wire.splitlines()
        if line.startswith("data: {")
        for kind in ("content", "reasoning_content")
    )
    return wire, texts


@pytest.mark.parametrize("spelling", ["as is", "percent"])
def test_a_route_key_split_across_deltas_is_masked_in_the_store(
    upstream: FakeUpstream, spelling: str
) -> None:
    form = SPELLINGS[spelling]
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(split_stream(form))
        wire, _ = streamed(proxy.url, "lane-split")
        stored = httpx.get(f"{proxy.url}/conversations/lane-split", headers=CLIENT).text
    assert form not in wire  # (each delta holds a piece)
    assert form not in stored
    assert "[REDACTED]" in stored


def joined_by(door: str, proxy_url: str, base: str) -> tuple[str, str]:
    """The reasoning and the answer a client of `door` joins from its stream."""
    if door == "chat":
        chat = openai.OpenAI(base_url=proxy_url, api_key=CLIENT_KEY, max_retries=0)
        reasoning = answer = ""
        for event in chat.chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        ):
            for choice in event.choices:
                reasoning += getattr(choice.delta, "reasoning_content", None) or ""
                answer += choice.delta.content or ""
        return reasoning, answer
    if door == "responses":
        chat = openai.OpenAI(base_url=proxy_url, api_key=CLIENT_KEY, max_retries=0)
        reasoning = answer = ""
        with chat.responses.stream(model="m", input="hi") as stream:
            for ev in stream:
                if ev.type == "response.reasoning_summary_text.delta":
                    reasoning += ev.delta
                elif ev.type == "response.output_text.delta":
                    answer += ev.delta
        return reasoning, answer
    messages = anthropic.Anthropic(base_url=base, api_key=CLIENT_KEY, max_retries=0)
    reasoning = answer = ""
    with messages.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:  # type: ignore[arg-type]
        for ev in stream:
            if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
                reasoning += ev.delta.thinking
            elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                answer += ev.delta.text
    return reasoning, answer


@pytest.mark.parametrize("door", ["chat", "responses", "messages"])
@pytest.mark.parametrize("spelling", ["as is", "percent"])
def test_a_route_key_split_across_deltas_is_masked_in_what_the_client_joins(
    upstream: FakeUpstream, door: str, spelling: str
) -> None:
    """Regression: a key the upstream split across two streamed deltas went
    to the client in two pieces, whole once it joined them (each delta is
    JSON of its own, and the mask read the bytes). Now the tail of a delta
    that could begin a key waits for the next delta: the key is masked, and
    the text around it arrives whole and in order."""
    form = SPELLINGS[spelling]
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(split_stream(form))
        if door == "chat":
            _, texts = streamed(proxy.url, "lane-split-joined")
            assert form not in texts
            assert "[REDACTED]" in texts
            upstream.script(split_stream(form))
        reasoning, answer = joined_by(door, proxy.url, proxy.base)
    assert (reasoning, answer) == ("the link had key=[REDACTED] in it", "see ?key=[REDACTED]")


def messages_split_stream(form: str) -> Stream:
    """A Messages upstream's stream that splits `form` across two thinking
    deltas and two text deltas."""

    def ev(name: str, data: dict[str, Any]) -> bytes:
        return (
            b"event: " + name.encode() + b"\ndata: " + json.dumps({"type": name, **data}).encode()
        )

    def delta(index: int, kind: str, field: str, text: str) -> bytes:
        return ev("content_block_delta", {"index": index, "delta": {"type": kind, field: text}})

    cut = len(form) // 2
    message = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 2, "output_tokens": 1},
    }
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    events = [
        ev("message_start", {"message": message}),
        ev("content_block_start", {"index": 0, "content_block": thinking}),
        delta(0, "thinking_delta", "thinking", f"the link had key={form[:cut]}"),
        delta(0, "thinking_delta", "thinking", f"{form[cut:]} in it"),
        delta(0, "signature_delta", "signature", "sig-1"),
        ev("content_block_stop", {"index": 0}),
        ev("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
        delta(1, "text_delta", "text", f"see ?key={form[:5]}"),
        b'event: ping\ndata: {"type": "ping"}',
        delta(1, "text_delta", "text", form[5:]),
        ev("content_block_stop", {"index": 1}),
        ev("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ev("message_stop", {}),
    ]
    return Stream([e + b"\n\n" for e in events], done=False, delay=0.02)


@pytest.mark.parametrize("api", ["responses", "messages"])
@pytest.mark.parametrize("spelling", ["as is", "percent"])
def test_a_route_key_split_across_a_native_upstreams_deltas_is_masked(
    upstream: FakeUpstream, api: str, spelling: str
) -> None:
    """The same through an upstream of the door's own API, whose events pass
    as they came: the held tail goes in front of the same text's next delta,
    or in a delta of its own before any other event."""
    from tests.test_responses_native import upstream_stream

    form = SPELLINGS[spelling]
    with running_proxy(route_config(upstream, api=api, api_key=ROUTE_KEY)) as proxy:
        if api == "responses":
            pieces = ["see ?key=", form[:7], form[7:] + " ok", " rk"]
            upstream.script(Stream([upstream_stream(pieces)], done=False))
            reasoning, answer = joined_by("responses", proxy.url, proxy.base)
            assert answer == "see ?key=[REDACTED] ok rk"  # "rk" began no key: it comes late
        else:
            upstream.script(messages_split_stream(form))
            reasoning, answer = joined_by("messages", proxy.url, proxy.base)
            assert (reasoning, answer) == (
                "the link had key=[REDACTED] in it",
                "see ?key=[REDACTED]",
            )


def test_a_route_key_split_across_a_tool_calls_arguments_is_masked(upstream: FakeUpstream) -> None:
    cut = len(ROUTE_KEY) // 2
    first = {"index": 0, "id": "call_1", "type": "function"}
    upstream.script(
        Stream(
            [
                chunk(
                    {"tool_calls": [{**first, "function": {"name": "f", "arguments": '{"k": '}}]}
                ),
                chunk(
                    {"tool_calls": [{"index": 0, "function": {"arguments": f'"{ROUTE_KEY[:cut]}'}}]}
                ),
                chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "function": {"arguments": f'{ROUTE_KEY[cut:]}"}}'}}
                        ]
                    }
                ),
                chunk({}, "tool_calls"),
            ],
            delay=0.05,
        )
    )
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        chat = openai.OpenAI(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
        arguments = ""
        for event in chat.chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
        ):
            for choice in event.choices:
                for call in choice.delta.tool_calls or []:
                    arguments += (call.function.arguments or "") if call.function else ""
        chat.close()
    assert arguments == '{"k": "[REDACTED]"}'


def test_a_route_key_split_across_reasoning_details_is_masked(upstream: FakeUpstream) -> None:
    """The same in OpenRouter's shape (`X-Reasoning-Output: reasoning_details`),
    where the reasoning is the text of `reasoning.text` items."""
    upstream.script(split_stream(ROUTE_KEY))
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        wire = httpx.post(
            f"{proxy.url}/chat/completions",
            headers={**CLIENT, "X-Reasoning-Output": "reasoning_details"},
            json={"model": "m", "stream": True, "messages": MESSAGES},
            timeout=30,
        ).text
    reasoning = "".join(
        item.get("text", "")
        for line in wire.splitlines()
        if line.startswith("data: {")
        for item in json.loads(line[6:])["choices"][0]["delta"].get("reasoning_details", [])
    )
    assert reasoning == "the link had key=[REDACTED] in it"


@pytest.mark.usefixtures("root_logging")
def test_logged_bodies_carry_neither_key(
    upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: with log_bodies, a turn that quoted the caller's own key
    (an upstream echoing the key it was sent) was logged with the key, and
    a route key quoted percent-encoded too; the redactor knows only the
    configured secrets and keys with a known prefix."""
    from proxy.observability import configure_logging

    echo = (
        f"you sent {CLIENT_KEY}; route key {quote(ROUTE_KEY, safe='')}, "
        f"json {SPELLINGS['json slash']}"
    )
    whole = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": echo, "reasoning_content": echo},
                "finish_reason": "stop",
            }
        ]
    }
    config = {
        "routes": [
            {"name": "keyed", "models": ["k*"], "upstream": upstream.url, "api_key": ROUTE_KEY},
            {"name": "open", "models": ["*"], "upstream": upstream.url},
        ],
        "server": {"log_level": "debug", "log_bodies": True},
    }
    with running_proxy(config) as proxy:
        configure_logging("debug", "json", proxy.config.secret_values())
        for model in ("k1", "o1"):
            upstream.script(Json(whole))
            answer = httpx.post(
                f"{proxy.url}/chat/completions",
                headers={"x-api-key": CLIENT_KEY},
                json={
                    "model": model,
                    "messages": [{"role": "user", "content": f"is {CLIENT_KEY} ok?"}],
                },
            )
            assert answer.status_code == 200
            # the caller's own key comes back to the caller: that is its lane
            assert CLIENT_KEY in answer.text
            assert not leaked(answer.text)
        logging.getLogger().handlers[0].flush()
    logged = capsys.readouterr().err
    bodies = [line for line in logged.splitlines() if '"body"' in line]
    assert len(bodies) == 4, logged  # a request and a response line per request
    assert CLIENT_KEY not in logged
    assert not leaked(logged), leaked(logged)
    # the open route got the client's key (no route key), the keyed one only its own
    assert [r.headers.get("authorization") for r in upstream.requests] == [
        f"Bearer {ROUTE_KEY}",
        None,
    ]
    assert [r.headers.get("x-api-key") for r in upstream.requests] == [None, CLIENT_KEY]


CREDENTIALS = {
    "Authorization": f"Bearer {CLIENT_KEY}",
    "X-Api-Key": CLIENT_KEY,
    "Api-Key": CLIENT_KEY,
    "X-Goog-Api-Key": CLIENT_KEY,
    "Cookie": f"session={CLIENT_KEY}",
    "Proxy-Authorization": f"Basic {CLIENT_KEY}",
}


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_no_client_credential_reaches_a_keyed_route_by_any_door(
    upstream: FakeUpstream, api: str
) -> None:
    """Every credential header a client can send at once, on each front
    door, the pass-through and Anthropic's model list: the keyed route's
    upstream gets its own key only."""
    answers: dict[str, Any] = {
        "chat": Json(
            {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ]
            }
        ),
        "responses": Json(
            {
                "id": "resp_lane1",
                "object": "response",
                "status": "completed",
                "model": "m",
                "output": [],
            }
        ),
        "messages": Json(
            {
                "id": "msg_lane1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        ),
    }
    door = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}[api]
    body: dict[str, Any] = {
        "chat": {"model": "m", "messages": MESSAGES},
        "responses": {"model": "m", "input": "hi", "store": False},
        "messages": {"model": "m", "max_tokens": 16, "messages": MESSAGES},
    }[api]
    with running_proxy(route_config(upstream, api=api, api_key=ROUTE_KEY)) as proxy:
        upstream.script(answers[api])
        sent = httpx.post(f"{proxy.url}{door}", headers=CREDENTIALS, json=body)
        assert sent.status_code == 200, sent.text
        passed = httpx.post(f"{proxy.url}/embeddings", headers=CREDENTIALS, json={"model": "m"})
        assert passed.status_code == 200
        listed = httpx.get(
            f"{proxy.url}/models", headers={**CREDENTIALS, "anthropic-version": "2023-06-01"}
        )
        assert listed.status_code == 200
    assert len(upstream.requests) == 3
    for request in upstream.requests:
        carrying = [k for k, v in request.headers.items() if CLIENT_KEY in v]
        assert carrying == [], (request.path, carrying)
        own = request.headers.get("x-api-key" if api == "messages" else "authorization")
        assert own is not None
        assert ROUTE_KEY in own


ADMIN = "adm-lane-0123456789"


def test_the_admin_token_is_never_sent_upstream(upstream: FakeUpstream) -> None:
    """On a route without its own key the client's credential goes upstream
    as it came; the admin token (the proxy's own secret, which reads every
    tenant) is refused there, on every door and the pass-through, with
    nothing sent. On a keyed route it goes nowhere, so it is served."""
    config = route_config(upstream, top={"server": {"admin_token": ADMIN}})
    as_bearer = {"Authorization": f"Bearer {ADMIN}"}
    with running_proxy(config) as proxy:
        oai = openai.OpenAI(base_url=proxy.url, api_key=ADMIN, max_retries=0)
        with pytest.raises(openai.PermissionDeniedError) as chat:
            oai.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        with pytest.raises(openai.PermissionDeniedError) as responses:
            oai.responses.create(model="m", input="hi")
        claude = anthropic.Anthropic(base_url=proxy.base, api_key=ADMIN, max_retries=0)
        with pytest.raises(anthropic.PermissionDeniedError):
            claude.messages.create(model="m", max_tokens=5, messages=MESSAGES)  # type: ignore[arg-type]
        passed = httpx.get(f"{proxy.url}/models", headers=as_bearer)
        in_another = httpx.get(f"{proxy.url}/files", headers={"api-key": ADMIN})
        in_the_query = [
            httpx.post(f"{proxy.url}/embeddings?{query}", json={"model": "m"})
            for query in (f"access_token={ADMIN}", f"key=%61{ADMIN[1:]}")
        ]
        # its own work is served as before
        listed = httpx.get(f"{proxy.url}/conversations", headers=as_bearer)
    assert upstream.requests == []
    assert chat.value.code == "admin_token_not_forwarded"
    assert responses.value.code == "admin_token_not_forwarded"
    assert passed.status_code == 403
    assert in_another.status_code == 403
    assert [r.status_code for r in in_the_query] == [403, 403]
    assert in_the_query[0].json()["error"]["code"] == "admin_token_not_forwarded"
    assert ADMIN not in passed.text
    assert listed.status_code == 200
    keyed = route_config(
        upstream, api_key="rk-lane-admin-0001", top={"server": {"admin_token": ADMIN}}
    )
    with running_proxy(keyed) as proxy:
        upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
        served = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            headers=as_bearer,
        )
    assert served.status_code == 200
    [sent] = upstream.requests
    assert ADMIN not in str(sent.headers)


def test_a_client_key_in_the_query_string_does_not_reach_a_keyed_route(
    upstream: FakeUpstream,
) -> None:
    """Gemini's `?key=` and the other spellings APIs take: on a route with
    its own key the pass-through drops them, and keeps every other
    parameter as the client wrote it; on an open route they go as they came."""
    query = f"key={CLIENT_KEY}&limit=5&Api%2DKey={CLIENT_KEY}&keyword=a%20b&ACCESS_TOKEN=x&api_key"
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(Json({"data": []}))
        keyed = httpx.get(f"{proxy.url}/models?{query}")
        upstream.script(Json({"data": []}))
        only = httpx.get(f"{proxy.url}/models?key={CLIENT_KEY}")
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(Json({"data": []}))
        open_route = httpx.get(f"{proxy.url}/models?{query}")
    assert [keyed.status_code, only.status_code, open_route.status_code] == [200, 200, 200]
    first, second, third = upstream.requests
    # (the fake upstream reads the query decoded)
    assert first.query == "limit=5&keyword=a b"
    assert second.query == ""
    assert CLIENT_KEY not in first.path + first.query + second.path + second.query
    assert third.query == unquote(query)


ACCOUNT_PATHS = [
    ("GET", "/files"),
    ("POST", "/files"),
    ("GET", "/files/file-abc/content"),
    ("DELETE", "/files/file-abc"),
    ("GET", "/%66iles"),
    ("GET", "//files"),
    ("POST", "/batches"),
    ("GET", "/vector_stores/vs_1/files"),
    ("POST", "/fine_tuning/jobs"),
    ("POST", "/uploads"),
    ("GET", "/assistants"),
    ("POST", "/threads/thread_1/runs"),
    ("DELETE", "/models/ft:gpt-4o:acme:1"),
    # spellings a server before the upstream may read as /files: a path
    # parameter (Tomcat strips it), an escaped one, twice-escaped, whitespace
    ("GET", "/files;/abc"),
    ("GET", "/vector_stores;x"),
    ("GET", "/files%3bx"),
    ("GET", "/%2566iles"),
    ("GET", "/files%20"),
]


def test_a_keyed_routes_account_objects_are_not_shared_unless_the_route_says_so(
    upstream: FakeUpstream,
) -> None:
    """With the route's key every client is one caller upstream: any of them
    could list, read or delete the files, batches or vector stores another
    made. Refused (403, nothing sent) unless the route sets shared_objects;
    routes without a key of their own forward each client's key, and the
    upstream keeps its callers apart."""
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        refused = [
            httpx.request(method, f"{proxy.url}{path}", headers=CLIENT, content=b"{}")
            for method, path in ACCOUNT_PATHS
        ]
        claude = anthropic.Anthropic(base_url=proxy.base, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(anthropic.PermissionDeniedError) as batches:
            claude.messages.batches.list()
        assert upstream.requests == []
        for answer in (Json({"data": []}), Json({"data": [], "object": "list"})):
            upstream.script(answer)
        models = httpx.get(f"{proxy.url}/models", headers=CLIENT)
        embeddings = httpx.post(f"{proxy.url}/embeddings", headers=CLIENT, json={"model": "m"})
    for response in refused:
        assert response.status_code == 403, response.request.url
        assert response.json()["error"]["code"] == "shared_objects_refused"
        assert "shared_objects" in response.json()["error"]["message"]
    assert isinstance(batches.value.body, dict)
    assert batches.value.body["error"]["type"] == "permission_error"
    assert [models.status_code, embeddings.status_code] == [200, 200]
    assert len(upstream.requests) == 2
    upstream.reset()
    shared = route_config(upstream, api_key=ROUTE_KEY, shared_objects=True)
    with running_proxy(shared) as proxy:
        upstream.script(Json({"data": []}))
        files = httpx.get(f"{proxy.url}/files", headers=CLIENT)
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(Json({"data": []}))
        own_key = httpx.get(f"{proxy.url}/files", headers=CLIENT)
    assert [files.status_code, own_key.status_code] == [200, 200]
    assert [r.path for r in upstream.requests] == ["/v1/files", "/v1/files"]
