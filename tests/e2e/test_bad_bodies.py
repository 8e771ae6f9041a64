"""Bad request bodies on the three front doors, through the real server: each
is refused with a 400 (413 past `limits.max_body_bytes`) in the door's own
error shape (OpenAI's `{"error": {message, type, param, code}}` on chat
completions and responses, Anthropic's `{"type": "error", "error": {type,
message}}` on messages and count_tokens), `param` naming the field, a
message that quotes none of the body, and nothing sent upstream. What the
doors accept on purpose is here too: any Content-Type (the body is read as
JSON, as upstreams read it), unknown fields (passed on by chat completions,
dropped and named by the translating doors), and, on chat completions,
fields it does not read, which the upstream judges with its own error."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy
from tests.messages_wire import sdk_client

KEY = "sk-bad-bodies-key-0123456789"
SECRET = "sk-live-secret-in-the-body-42"  # a credential a client put in a bad field
HEADERS = {"Authorization": f"Bearer {KEY}"}
USER = [{"role": "user", "content": "hi"}]

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
DOORS = [CHAT, RESPONSES, MESSAGES, COUNT]
ANTHROPIC = (MESSAGES, COUNT)


def good(path: str) -> dict[str, Any]:
    """A body each door answers."""
    if path == CHAT:
        return {"model": "m", "messages": list(USER)}
    if path == RESPONSES:
        return {"model": "m", "input": "hi"}
    if path == MESSAGES:
        return {"model": "m", "max_tokens": 16, "messages": list(USER)}
    return {"model": "m", "messages": list(USER)}


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream_server)) as server:
        yield server


@pytest.fixture
def post(proxy: ProxyServer, upstream: FakeUpstream) -> Callable[..., httpx.Response]:
    def send(path: str, content: bytes, **headers: str) -> httpx.Response:
        merged = {**HEADERS, "content-type": "application/json", **headers}
        merged = {k: v for k, v in merged.items() if v}  # "" leaves a header out
        return httpx.post(proxy.base + path, content=content, headers=merged, timeout=60)

    return send


def refused(
    r: httpx.Response, path: str, upstream: FakeUpstream, status: int = 400
) -> dict[str, Any]:
    """The door's own error shape with `status`, no secret in it, nothing
    sent upstream; the error object (OpenAI's, or Anthropic's inner one)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert upstream.requests == []
    assert KEY not in r.text
    assert SECRET not in r.text
    body = r.json()
    if path in ANTHROPIC:
        assert set(body) == {"type", "error"}, body
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}, body
        kind = "request_too_large" if status == 413 else "invalid_request_error"
        assert body["error"]["type"] == kind
        return dict(body["error"])
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["type"] == "invalid_request_error"
    return dict(body["error"])


# -- bodies that are no JSON object ---------------------------------------------------

NESTED = b"[" * 10_000 + b"]" * 10_000
GOOD_TAIL = b'"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"input":"hi"'
NOT_JSON = [
    ("not-json", b"hello", "unexpected character"),
    ("empty", b"", "empty document"),
    ("invalid-utf8", b'{"model":"m","input":"\xff\xfe","messages":"\xff"}', "UTF-8"),
    ("utf8-bom", b"\xef\xbb\xbf{" + GOOD_TAIL + b"}", "byte order mark"),
    ("utf16", ("{" + GOOD_TAIL.decode() + "}").encode("utf-16"), "UTF-8"),
    ("nan", b"{" + GOOD_TAIL + b',"temperature":NaN}', "column"),
    ("infinity", b"{" + GOOD_TAIL + b',"temperature":-Infinity}', "column"),
    ("huge-integer", b"{" + GOOD_TAIL + b',"top_k":1' + b"0" * 400 + b"}", "number"),
    ("huge-float", b"{" + GOOD_TAIL + b',"temperature":1e400}', "number"),
    ("nested-10000", b"{" + GOOD_TAIL + b',"metadata":' + NESTED + b"}", "depth"),
    (
        "nested-messages",
        b'{"model":"m","messages":' + NESTED + b',"input":' + NESTED + b"}",
        "depth",
    ),
    ("trailing-data", b"{" + GOOD_TAIL + b"}{}", "after document"),
    ("lone-surrogate", b'{"model":"m","input":"\\ud800","messages":"\\ud800"}', "surrogate"),
    ("nul-bytes", b"\x00" * 8, "unexpected character"),
    ("secret-in-broken-json", b'{"api_key":"' + SECRET.encode() + b'" "x"}', "column"),
]


@pytest.mark.parametrize("path", DOORS)
@pytest.mark.parametrize(
    ("body", "why"), [(b, w) for _, b, w in NOT_JSON], ids=[i for i, _, _ in NOT_JSON]
)
def test_a_body_that_is_not_json_is_a_400_saying_why(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, path: str, body: bytes, why: str
) -> None:
    error = refused(post(path, body), path, upstream)
    assert error["message"].startswith("The request body is not valid JSON: ")
    assert why in error["message"]
    if path not in ANTHROPIC:
        assert error["param"] is None
        assert error["code"] == "invalid_json"


@pytest.mark.parametrize("path", DOORS)
@pytest.mark.parametrize("body", [b"[1, 2]", b'"x"', b"null", b"5", b"true", b"[]"])
def test_json_that_is_not_an_object_is_a_400(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, path: str, body: bytes
) -> None:
    error = refused(post(path, body), path, upstream)
    assert error["message"] == "The request body must be a JSON object."


@pytest.mark.parametrize("path", DOORS)
@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_past_the_limit_is_a_413(
    post: Callable[..., httpx.Response],
    proxy: ProxyServer,
    upstream: FakeUpstream,
    path: str,
    chunked: bool,
) -> None:
    """README: `limits.max_body_bytes`, 16 MiB by default; a 20 MB body."""
    body = good(path)
    body["pad"] = "a" * (20 * 1024 * 1024)
    raw = json.dumps(body).encode()
    if chunked:  # no Content-Length: the limit holds as the body streams in
        pieces = (raw[i : i + (1 << 20)] for i in range(0, len(raw), 1 << 20))
        merged = {**HEADERS, "content-type": "application/json"}
        r = httpx.post(proxy.base + path, content=pieces, headers=merged, timeout=60)
    else:
        r = post(path, raw)
    error = refused(r, path, upstream, status=413)
    assert "limits.max_body_bytes (16777216 bytes)" in error["message"]


def test_duplicate_keys_take_the_last_and_the_upstream_gets_one(
    post: Callable[..., httpx.Response], upstream: FakeUpstream
) -> None:
    """A key given twice is read as the last (as Python's json reads it), and
    the upstream gets the body written again, with the key once: the proxy
    and the upstream cannot read two different requests from one body."""
    raw = b'{"model":"first","model":"second","messages":[{"role":"user","content":"hi"}]}'
    r = post(CHAT, raw)
    assert r.status_code == 200, r.text
    sent = upstream.chat_requests()[0].body
    assert sent.count(b'"model"') == 1
    assert json.loads(sent)["model"] == "second"


# -- fields: missing, wrong types, wrong shapes ---------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}
ANTHROPIC_TOOL = {"name": "f", "input_schema": {"type": "object"}}
SKIP: Any = object()  # the field left out


def _cases(*rows: tuple[str, str, Any, str]) -> list[Any]:
    return [pytest.param(field, value, expected, id=name) for name, field, value, expected in rows]


# chat completions reads model, messages and stream itself (the rest the upstream judges)
CHAT_FIELDS = _cases(
    ("messages-missing", "messages", SKIP, "messages"),
    ("messages-null", "messages", None, "messages"),
    ("messages-string", "messages", "hi", "messages"),
    ("messages-object", "messages", {"role": "user"}, "messages"),
    ("messages-empty", "messages", [], "messages"),
    ("model-number", "model", 5, "model"),
    ("model-array", "model", [SECRET], "model"),
    ("stream-string", "stream", "true", "stream"),
    ("stream-number", "stream", 1, "stream"),
)

RESPONSES_FIELDS = _cases(
    ("input-missing", "input", SKIP, "input"),
    ("input-null", "input", None, "input"),
    ("input-number", "input", 5, "input"),
    ("input-object", "input", {"role": "user"}, "input"),
    ("input-empty", "input", [], "input"),
    ("item-number", "input", [1], "input[0]"),
    ("item-string", "input", [SECRET], "input[0]"),
    ("message-no-type-no-role", "input", [{"content": "hi"}], "input[0].type"),
    ("role-unknown", "input", [{"role": SECRET, "content": "hi"}], "input[0].role"),
    ("role-tool", "input", [{"role": "tool", "content": "hi"}], "input[0].role"),
    ("content-missing", "input", [{"role": "user"}], "input[0].content"),
    ("content-number", "input", [{"role": "user", "content": 5}], "input[0].content"),
    (
        "part-without-type",
        "input",
        [{"role": "user", "content": [{"text": "x"}]}],
        "input[0].content[0].type",
    ),
    ("part-number", "input", [{"role": "user", "content": [5]}], "input[0].content[0].type"),
    (
        "text-part-number",
        "input",
        [{"role": "user", "content": [{"type": "input_text", "text": 5}]}],
        "input[0].content[0].text",
    ),
    (
        "image-url-number",
        "input",
        [{"role": "user", "content": [{"type": "input_image", "image_url": 5}]}],
        "input[0].content[0].image_url",
    ),
    (
        "output-for-unknown-call",
        "input",
        [{"type": "function_call_output", "call_id": "nope", "output": "x"}],
        "input[0].call_id",
    ),
    ("model-number", "model", 5, "model"),
    ("stream-string", "stream", "yes", "stream"),
    ("temperature-string", "temperature", "hot", "temperature"),
    ("top-p-string", "top_p", "x", "top_p"),
    ("max-output-tokens-string", "max_output_tokens", "5", "max_output_tokens"),
    ("max-output-tokens-negative", "max_output_tokens", -1, "max_output_tokens"),
    ("instructions-number", "instructions", 5, "instructions"),
    ("tools-string", "tools", "x", "tools"),
    ("tool-number", "tools", [5], "tools[0]"),
    ("tool-without-type", "tools", [{"name": "f"}], "tools[0].type"),
    ("function-without-name", "tools", [{"type": "function"}], "tools[0].name"),
    ("function-name-number", "tools", [{"type": "function", "name": 5}], "tools[0].name"),
    (
        "function-parameters-number",
        "tools",
        [{"type": "function", "name": "f", "parameters": 5}],
        "tools[0].parameters",
    ),
    ("tool-choice-number", "tool_choice", 5, "tool_choice"),
    ("tool-choice-unknown-mode", "tool_choice", SECRET, "tool_choice"),
    (
        "tool-choice-missing-tool",
        "tool_choice",
        {"type": "function", "name": "nope"},
        "tool_choice.name",
    ),
    ("tool-choice-without-name", "tool_choice", {"type": "function"}, "tool_choice.name"),
    ("parallel-tool-calls-string", "parallel_tool_calls", "x", "parallel_tool_calls"),
    ("reasoning-string", "reasoning", "high", "reasoning"),
    ("reasoning-effort-unknown", "reasoning", {"effort": SECRET}, "reasoning.effort"),
    ("reasoning-effort-number", "reasoning", {"effort": 5}, "reasoning.effort"),
    ("text-string", "text", "x", "text"),
    ("text-format-number", "text", {"format": 5}, "text.format"),
    ("text-format-unknown", "text", {"format": {"type": "zzz"}}, "text.format.type"),
    ("metadata-string", "metadata", "x", "metadata"),
    ("include-string", "include", "x", "include"),
    ("include-numbers", "include", [5], "include"),
    ("previous-response-id-number", "previous_response_id", 5, "previous_response_id"),
    ("store-string", "store", "x", "store"),
)

# (Anthropic's shape has no param: the message starts with the field's path)
MESSAGES_FIELDS = _cases(
    ("model-missing", "model", SKIP, "model:"),
    ("model-null", "model", None, "model:"),
    ("model-number", "model", 5, "model:"),
    (
        "tool-choice-unknown-tool",
        "tool_choice",
        {"type": "tool", "name": "nowhere"},
        "tool_choice.name:",
    ),
    ("messages-missing", "messages", SKIP, "messages:"),
    ("messages-string", "messages", "hi", "messages:"),
    ("messages-empty", "messages", [], "messages:"),
    ("message-number", "messages", [1], "messages[0]:"),
    ("message-without-role", "messages", [{"content": "hi"}], "messages[0].role:"),
    ("role-unknown", "messages", [{"role": SECRET, "content": "hi"}], "messages[0].role:"),
    ("role-tool", "messages", [{"role": "tool", "content": "hi"}], "messages[0].role:"),
    ("content-missing", "messages", [{"role": "user"}], "messages[0].content:"),
    ("content-number", "messages", [{"role": "user", "content": 5}], "messages[0].content:"),
    (
        "block-without-type",
        "messages",
        [{"role": "user", "content": [{"text": "x"}]}],
        "messages[0].content[0]:",
    ),
    (
        "text-block-number",
        "messages",
        [{"role": "user", "content": [{"type": "text", "text": 5}]}],
        "messages[0].content[0].text:",
    ),
    (
        "image-source-number",
        "messages",
        [{"role": "user", "content": [{"type": "image", "source": 5}]}],
        "messages[0].content[0].source:",
    ),
    (
        "tool-result-for-unknown-id",
        "messages",
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}],
        "messages[0].content[0].tool_use_id:",
    ),
    (
        "tool-use-without-name",
        "messages",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]}],
        "messages[0].content[0].name:",
    ),
    (
        "tool-use-input-string",
        "messages",
        [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}],
            }
        ],
        "messages[0].content[0].input:",
    ),
    ("stream-string", "stream", "yes", "stream:"),
    ("temperature-string", "temperature", "hot", "temperature:"),
    ("top-p-string", "top_p", "x", "top_p:"),
    ("top-k-string", "top_k", "x", "top_k:"),
    ("stop-sequences-string", "stop_sequences", "x", "stop_sequences:"),
    ("system-number", "system", 5, "system:"),
    ("system-block-without-text", "system", [{"type": "text"}], "system[0].text:"),
    ("tools-string", "tools", "x", "tools:"),
    ("tool-number", "tools", [5], "tools[0]:"),
    ("tool-without-name", "tools", [{"input_schema": {}}], "tools[0].name:"),
    ("tool-without-anything", "tools", [{}], "tools[0].name:"),
    ("tool-without-input-schema", "tools", [{"name": "f"}], "tools[0].input_schema:"),
    (
        "custom-tool-without-input-schema",
        "tools",
        [{"type": "custom", "name": "f"}],
        "tools[0].input_schema:",
    ),
    (
        "tool-input-schema-string",
        "tools",
        [{"name": "f", "input_schema": "x"}],
        "tools[0].input_schema:",
    ),
    ("tool-choice-string", "tool_choice", "auto", "tool_choice:"),
    (
        "tool-choice-openai-shape",
        "tool_choice",
        {"type": "function", "name": "f"},
        "tool_choice.type:",
    ),
    ("tool-choice-without-name", "tool_choice", {"type": "tool"}, "tool_choice.name:"),
    ("thinking-string", "thinking", "on", "thinking:"),
    ("thinking-without-budget", "thinking", {"type": "enabled"}, "thinking.budget_tokens:"),
    (
        "thinking-budget-string",
        "thinking",
        {"type": "enabled", "budget_tokens": "x"},
        "thinking.budget_tokens:",
    ),
    ("metadata-string", "metadata", "x", "metadata:"),
    ("output-config-string", "output_config", "x", "output_config:"),
    ("effort-unknown", "output_config", {"effort": SECRET}, "output_config.effort:"),
)

# max_tokens is required by messages, not by count_tokens
MAX_TOKENS = _cases(
    ("max-tokens-missing", "max_tokens", SKIP, "max_tokens:"),
    ("max-tokens-null", "max_tokens", None, "max_tokens:"),
    ("max-tokens-string", "max_tokens", "5", "max_tokens:"),
    ("max-tokens-negative", "max_tokens", -1, "max_tokens:"),  # 0 warms the cache: valid
    ("max-tokens-float", "max_tokens", 1.5, "max_tokens:"),
)


def with_field(path: str, field: str, value: Any) -> bytes:
    body = good(path)
    if value is SKIP:
        body.pop(field, None)
    else:
        body[field] = value
    if field == "tool_choice" and path == RESPONSES:
        body["tools"] = [FUNCTION]
    if field == "tool_choice" and path in ANTHROPIC:
        body["tools"] = [ANTHROPIC_TOOL]
    return json.dumps(body).encode()


@pytest.mark.parametrize(("field", "value", "param"), CHAT_FIELDS)
def test_chat_completions_names_the_bad_field(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, field: str, value: Any, param: str
) -> None:
    error = refused(post(CHAT, with_field(CHAT, field, value)), CHAT, upstream)
    assert error["param"] == param
    assert error["message"].startswith(param)


@pytest.mark.parametrize(("field", "value", "param"), RESPONSES_FIELDS)
def test_responses_names_the_bad_field(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, field: str, value: Any, param: str
) -> None:
    error = refused(post(RESPONSES, with_field(RESPONSES, field, value)), RESPONSES, upstream)
    assert error["param"] == param
    assert error["message"].startswith(param)


@pytest.mark.parametrize("path", ANTHROPIC)
@pytest.mark.parametrize(("field", "value", "where"), MESSAGES_FIELDS)
def test_messages_names_the_bad_field(
    post: Callable[..., httpx.Response],
    upstream: FakeUpstream,
    path: str,
    field: str,
    value: Any,
    where: str,
) -> None:
    error = refused(post(path, with_field(path, field, value)), path, upstream)
    assert error["message"].startswith(where)


@pytest.mark.parametrize(("field", "value", "where"), MAX_TOKENS)
def test_messages_needs_max_tokens_and_count_tokens_does_not(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, field: str, value: Any, where: str
) -> None:
    error = refused(post(MESSAGES, with_field(MESSAGES, field, value)), MESSAGES, upstream)
    assert error["message"].startswith(where)
    if value is SKIP or value is None:
        r = post(COUNT, with_field(COUNT, field, value))
        assert r.status_code == 200, r.text


# -- what the doors take on purpose ---------------------------------------------------


@pytest.mark.parametrize("path", DOORS)
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "", "application/x-www-form-urlencoded", "application/json; charset=utf-8"],
)
def test_a_json_body_is_read_whatever_its_content_type(
    post: Callable[..., httpx.Response], upstream: FakeUpstream, path: str, content_type: str
) -> None:
    """As the pass-through paths and the upstreams read it (README, routes)."""
    r = post(path, json.dumps(good(path)).encode(), **{"content-type": content_type})
    assert r.status_code == 200, r.text
    assert len(upstream.requests) == (0 if path == COUNT else 1)


@pytest.mark.parametrize("path", DOORS)
def test_a_multipart_form_is_not_json(
    proxy: ProxyServer, upstream: FakeUpstream, path: str
) -> None:
    r = httpx.post(
        proxy.base + path,
        files={"model": (None, "m"), "messages": (None, "hi")},
        headers=HEADERS,
        timeout=30,
    )
    error = refused(r, path, upstream)
    assert error["message"].startswith("The request body is not valid JSON: ")


def test_chat_completions_passes_unknown_fields_and_fields_it_does_not_read(
    post: Callable[..., httpx.Response], upstream: FakeUpstream
) -> None:
    """The chat door's wire is the upstream's: what it does not read itself
    goes on as sent (an upstream's own extensions among it), and a value the
    upstream refuses comes back with the upstream's status and body."""
    body = {**good(CHAT), "frobnicate": {"x": 1}, "temperature": "hot", "n": "2"}
    refusal = {
        "error": {
            "message": "Invalid type for 'temperature'.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "invalid_type",
        }
    }
    upstream.script(Json(refusal, status=400))
    r = post(CHAT, json.dumps(body).encode())
    assert r.status_code == 400
    assert r.json() == refusal
    sent = upstream.chat_requests()[0].json
    assert sent["frobnicate"] == {"x": 1}
    assert sent["temperature"] == "hot"
    assert sent["n"] == "2"


@pytest.mark.parametrize(
    ("path", "extra", "named"),
    [
        (RESPONSES, {"frobnicate": 1, "n": 2}, "frobnicate, n"),
        (
            RESPONSES,
            {"tools": [FUNCTION], "tool_choice": {"type": "web_search_preview"}},
            "tool_choice",
        ),
        (MESSAGES, {"frobnicate": 1, "n": 2}, "frobnicate, n"),
    ],
    ids=["responses-unknown-fields", "responses-hosted-tool-choice", "messages-unknown-fields"],
)
def test_the_translating_doors_drop_and_name_what_they_cannot_map(
    post: Callable[..., httpx.Response],
    upstream: FakeUpstream,
    path: str,
    extra: dict[str, Any],
    named: str,
) -> None:
    r = post(path, json.dumps({**good(path), **extra}).encode())
    assert r.status_code == 200, r.text
    assert r.headers["x-proxy-dropped-fields"] == named
    sent = upstream.chat_requests()[0].json
    assert not set(named.split(", ")) & set(sent)


# -- the official SDKs see the errors as the real APIs' ---------------------------------


def test_the_openai_sdk_reads_param_and_code(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    sdk = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
    with sdk:
        with pytest.raises(openai.BadRequestError) as chat:
            sdk.chat.completions.create(model="m", messages=[], stream="yes")  # type: ignore[call-overload]
        with pytest.raises(openai.BadRequestError) as responses:
            sdk.responses.create(
                model="m",
                input="hi",
                tools=[FUNCTION],  # type: ignore[list-item]
                tool_choice={"type": "function", "name": "nope"},
            )
        with pytest.raises(openai.BadRequestError) as broken:
            sdk.post("/responses", body="{", cast_to=object)  # type: ignore[arg-type]
    assert chat.value.status_code == 400
    assert (chat.value.param, chat.value.code) == ("messages", "invalid_messages")
    assert (responses.value.param, responses.value.code) == ("tool_choice.name", "invalid_request")
    assert responses.value.body["message"].startswith("tool_choice.name")  # type: ignore[index]
    assert (broken.value.param, broken.value.code) == (None, "invalid_json")
    assert upstream.requests == []


def test_the_anthropic_sdk_reads_the_error_type(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    sdk = sdk_client(proxy.base, KEY)
    with pytest.raises(anthropic.BadRequestError) as create:
        sdk.messages.create(
            model="m",
            max_tokens=16,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"name": "f"}],  # type: ignore[list-item]
        )
    with pytest.raises(anthropic.BadRequestError) as count:
        sdk.messages.count_tokens(
            model="m",
            messages=[{"role": "wizard", "content": "hi"}],  # type: ignore[typeddict-item]
        )
    assert create.value.status_code == 400
    assert create.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    error = create.value.body["error"]  # type: ignore[index]
    assert error["message"] == "tools[0].input_schema: must be an object"
    assert count.value.body["error"]["message"].startswith("messages[0].role:")  # type: ignore[index]
    assert upstream.requests == []
