"""An upstream's error whose body is not JSON (a load balancer's or a
gateway's HTML page, plain text, nothing) reaches the client in its door's
error shape, as JSON, with the upstream's status and Retry-After: on every
door, streamed and not, and on a route that speaks the door's own API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, running_proxy

PAGE = b"<html><body><h1>503 Service Unavailable</h1></body></html>"
KEY = {"Authorization": "Bearer sk-error-pages"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def proxy_url(upstream: FakeUpstream) -> Iterator[str]:
    routes = [
        {"name": "native-r", "models": ["resp-*"], "upstream": upstream.url, "api": "responses"},
        {"name": "native-m", "models": ["msg-*"], "upstream": upstream.url, "api": "messages"},
        {"name": "chat", "models": ["*"], "upstream": upstream.url},
    ]
    with running_proxy({"routes": routes}) as proxy:
        yield proxy.base


def _request(door: str, model: str, stream: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
    headers = dict(KEY)
    if door == "chat":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
        return "/v1/chat/completions", {"model": model, "stream": stream, **body}, headers
    if door == "responses":
        return "/v1/responses", {"model": model, "stream": stream, "input": "hi"}, headers
    headers["anthropic-version"] = "2023-06-01"
    body = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    return "/v1/messages", {"model": model, "stream": stream, **body}, headers


CASES = [
    ("chat", "m"),
    ("responses", "m"),
    ("messages", "m"),
    ("responses", "resp-m"),
    ("messages", "msg-m"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("door", "model"), CASES)
def test_an_html_error_page_comes_in_the_doors_shape(
    upstream: FakeUpstream, proxy_url: str, door: str, model: str, stream: bool
) -> None:
    upstream.reset()
    page = {"Content-Type": "text/html", "Retry-After": "9"}
    upstream.script(Json(PAGE, status=503, headers=page))
    path, body, headers = _request(door, model, stream)
    r = httpx.post(proxy_url + path, json=body, headers=headers, timeout=10)
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["retry-after"] == "9"
    data = r.json()
    if door == "messages":
        assert data["type"] == "error"
        assert data["error"]["type"] == "overloaded_error"
        assert data["error"]["message"] == PAGE.decode()
    else:
        assert data == {
            "error": {
                "message": PAGE.decode(),
                "type": "upstream_error",
                "param": None,
                "code": None,
            }
        }


@pytest.mark.parametrize(("door", "model"), [("chat", "m"), ("responses", "resp-m")])
def test_an_empty_error_body_is_an_error_object(
    upstream: FakeUpstream, proxy_url: str, door: str, model: str
) -> None:
    upstream.reset()
    upstream.script(Json(b"", status=502, headers={"Content-Type": "text/plain"}))
    path, body, headers = _request(door, model, False)
    r = httpx.post(proxy_url + path, json=body, headers=headers, timeout=10)
    assert r.status_code == 502
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["message"] == "The upstream returned an error."


def test_a_json_error_body_goes_as_it_came(upstream: FakeUpstream, proxy_url: str) -> None:
    upstream.reset()
    raw = b'{"detail": "Model is loading"}'
    upstream.script(Json(raw, status=503))
    path, body, headers = _request("chat", "m", False)
    r = httpx.post(proxy_url + path, json=body, headers=headers, timeout=10)
    assert (r.status_code, r.content) == (503, raw)


def test_the_openai_sdk_reads_the_pages_text(upstream: FakeUpstream, proxy_url: str) -> None:
    upstream.reset()
    upstream.script(Json(b"Bad Gateway", status=502, headers={"Content-Type": "text/plain"}))
    client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-error-pages", max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.responses.create(model="resp-m", input="hi")
    assert raised.value.status_code == 502
    assert raised.value.body == {
        "message": "Bad Gateway",
        "type": "upstream_error",
        "param": None,
        "code": None,
    }
    assert raised.value.type == "upstream_error"
