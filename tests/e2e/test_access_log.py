"""One access-log line for every request, whatever answers it (a front door,
the pass-through, an API router, or the dispatch refusing it), and one Date
and one Server header on every response, also where the upstream sent its own."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from proxy.observability import FIELD_LIMIT
from tests.casefiles import chunk
from tests.e2e.test_shutdown import Serve
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.stores.servers import wait_until

ADMIN = "admin-token-for-the-access-log"
KEY = {"Authorization": "Bearer sk-access-log-client-key"}
USER = [{"role": "user", "content": "hi"}]


def completion(content: str) -> Json:
    return Json(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "proxy.request"]


def test_every_request_gets_exactly_one_access_line(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = route_config(upstream, top={"server": {"admin_token": ADMIN, "log_bodies": True}})
    admin = {"Authorization": f"Bearer {ADMIN}"}
    chat_body = {"model": "m", "messages": USER}
    # (method, path as sent, keyword arguments, expected status, expected endpoint)
    kinds: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("POST", "/v1/chat/completions", {"json": chat_body}, 200, "chat.completions"),
        (
            "POST",
            "/v1/chat/completions",
            {
                "json": {**chat_body, "stream": True},
                "headers": {**KEY, "X-Conversation-Id": "log-1"},
            },
            200,
            "chat.completions",
        ),
        (
            "POST",
            "/v1/chat/completions",
            {"json": chat_body, "headers": {**KEY, "X-Reasoning-Effort": "enormous"}},
            400,
            "chat.completions",
        ),
        ("GET", "/v1/chat/completions", {}, 405, "chat.completions"),
        (
            "POST",
            "/v1/messages/count_tokens",
            {"json": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}},
            200,
            "messages.count_tokens",
        ),
        (
            "POST",
            "/v1/responses/input_tokens",
            {"json": {"model": "m", "input": "hi"}},
            200,
            "responses.input_tokens",
        ),
        (
            "POST",
            "/v1/responses/compact",
            {"json": {"model": "m", "input": "hi"}},
            404,
            "responses.compact",
        ),
        ("GET", "/v1/messages", {}, 405, "messages"),
        ("GET", "/v1/responses", {}, 405, "responses"),
        ("GET", "/v1/models", {}, 200, "passthrough"),
        ("GET", "/v1/conversations?limit=5", {}, 200, "conversations"),
        ("GET", "/v1/conversations/log-1", {}, 200, "conversations"),
        ("GET", "/v1/conversations", {"headers": admin}, 200, "conversations"),
        ("GET", "/v1/conversations/unknown-id", {}, 404, "conversations"),
        ("GET", "/v1/reasoning/profiles", {}, 200, "profiles"),
        (
            "PUT",
            "/v1/reasoning/profiles/quick",
            {"json": {"effort": "low"}, "headers": {}},
            401,
            "profiles",
        ),
        (
            "PUT",
            "/v1/reasoning/profiles/quick",
            {"json": {"effort": "low"}, "headers": {"Authorization": "Bearer wrong-token"}},
            403,
            "profiles",
        ),
        (
            "PUT",
            "/v1/reasoning/profiles/quick",
            {"json": {"effort": "low"}, "headers": admin},
            200,
            "profiles",
        ),
        ("DELETE", "/v1/conversations/log-1", {}, 204, "conversations"),
        ("GET", "/healthz", {}, 200, "healthz"),
        ("GET", "/readyz", {}, 200, "readyz"),
        ("GET", "/metrics", {}, 200, "metrics"),
        ("GET", "/ui", {}, 200, "ui"),
        ("GET", "/nowhere", {}, 404, "other"),
        ("GET", "/", {}, 200, "root"),
        ("HEAD", "/", {}, 200, "root"),
    ]
    with running_proxy(config) as proxy:
        tenant = proxy.runtime.tenant(KEY["Authorization"])
        for method, path, kwargs, status, endpoint in kinds:
            if path == "/v1/chat/completions" and method == "POST":
                stream = kwargs["json"].get("stream")
                upstream.script(
                    Stream([chunk({"content": "hello"}), chunk({}, "stop")])
                    if stream
                    else completion("hello")
                )
            seen = len(lines(caplog))
            headers = kwargs.pop("headers", KEY)
            response = httpx.request(
                method, proxy.base + path, headers=headers, timeout=10, **kwargs
            )
            assert response.status_code == status, (method, path, response.text)
            # the line is written once the response has ended
            wait_until(lambda s=seen: len(lines(caplog)) > s, what=f"{method} {path}'s line")
            record = lines(caplog)[-1]
            where = (method, path)
            assert record.method == method, where  # type: ignore[attr-defined]
            assert record.path == path.split("?")[0], where  # type: ignore[attr-defined]
            assert record.status == status, where  # type: ignore[attr-defined]
            assert record.endpoint == endpoint, where  # type: ignore[attr-defined]
            assert record.duration_ms >= 0, where  # type: ignore[attr-defined]
            assert record.getMessage() == f"{method} {path.split('?')[0]} {status}"
            if endpoint in ("passthrough", "conversations") or record.route != "-":
                expected = "admin" if headers is admin else tenant
                assert record.tenant == expected, where  # type: ignore[attr-defined]
        # no request made a second line
        assert len(lines(caplog)) == len(kinds)
    chat = [r for r in lines(caplog) if r.endpoint == "chat.completions"]  # type: ignore[attr-defined]
    assert [r.route for r in chat] == ["test", "test", "-", "-"]  # type: ignore[attr-defined]
    assert chat[1].conversation == "log-1"  # type: ignore[attr-defined]
    assert chat[2].error == "invalid_reasoning_setting"  # type: ignore[attr-defined]


def test_one_date_and_one_server_header(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(completion("whole"))
        whole = httpx.post(
            proxy.url + "/chat/completions", json={"model": "m", "messages": USER}, timeout=10
        )
        upstream.script(Stream([chunk({"content": "streamed"}), chunk({}, "stop")]))
        streamed = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "m", "messages": USER, "stream": True},
            timeout=10,
        )
        passed = httpx.get(proxy.url + "/models", timeout=10)
        own = httpx.get(proxy.base + "/healthz", timeout=10)
        direct = httpx.get(upstream.url + "/models", timeout=10)
    # the fake upstream (aiohttp) sends both headers itself
    assert direct.headers.get_list("server")
    assert direct.headers.get_list("date")
    for response in (whole, streamed, passed, own):
        assert response.status_code == 200
        assert len(response.headers.get_list("date")) == 1, response.headers
        assert response.headers.get_list("server") == ["uvicorn"], response.headers


@pytest.mark.parametrize("path", ["responses", "messages"])
def test_dropped_names_are_in_the_line_on_both_translating_doors(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.INFO)
    upstream.script(Stream([chunk({"content": "hello"}), chunk({}, "stop")]))
    body: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 5, "a_new_field": 1}
    body["input" if path == "responses" else "messages"] = USER
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/{path}", json=body, headers=KEY, timeout=30)
        assert r.status_code == 200
        wait_until(lambda: len(lines(caplog)) >= 1, what="the line")
    (record,) = lines(caplog)
    assert record.dropped_fields == r.headers["x-proxy-dropped-fields"]  # type: ignore[attr-defined]
    assert "a_new_field" in record.dropped_fields  # type: ignore[attr-defined]


FORGED_LINE = "2030-01-01 00:00:00 INFO    [1] proxy.request: GET /forged 200"


def test_a_text_log_keeps_each_request_to_one_line_whatever_the_client_sends(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """`serve --log-format text`: a model name with a line break and ESC, or a
    path with `%0a`, wrote a forged second line and raw terminal escapes; a
    300 KB model name was written whole."""
    config = {"routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}]}
    proxy = Serve(tmp_path, config).start()  # with --log-format text
    try:
        upstream.script(completion("one"), completion("two"))
        for model in (f"m\n{FORGED_LINE}\x1b[2J\x1b]0;title\x07", "é" * 300_000):
            r = httpx.post(
                proxy.base + "/v1/chat/completions",
                json={"model": model, "messages": USER},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        # scope["path"] is percent-decoded: %0a is a line break, %1b ESC
        r = httpx.get(proxy.base + "/v1/models%0a" + quote(FORGED_LINE) + "%1b[31m", timeout=30)
        assert r.status_code == 400  # refused, and logged
        proxy.signal(signal.SIGTERM)
        assert proxy.wait(30) == 0
    finally:
        proxy.stop()
    output = proxy.output()
    assert "\x1b" not in output
    assert "\x07" not in output
    assert not any(line.startswith("2030-") for line in output.splitlines()), output
    access = [line for line in output.splitlines() if " proxy.request: " in line]
    access = [line for line in access if "/healthz" not in line]  # start() asked it
    assert len(access) == 3, output
    first, long, path = access
    assert f'model="m\\n{FORGED_LINE}\\x1b[2J\\x1b]0;title\\x07"' in first
    assert "model=" + "é" * FIELD_LIMIT + f"…(+{300_000 - FIELD_LIMIT}) " in long
    assert len(long) < 1000
    assert f"proxy.request: GET /v1/models\\n{FORGED_LINE}\\x1b[31m 400 " in path
    assert len(output) < 10_000
