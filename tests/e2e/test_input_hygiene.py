"""Input the proxy must not trust or echo, end to end: credentials in logged
bodies, a byte-order mark before the upstream's first event, and a
conversation id header sent twice."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.observability import REDACTED, configure_logging
from tests.casefiles import chunk, read_stream
from tests.harness import FakeUpstream, Stream, route_config, running_proxy, sse

KEY = {"Authorization": "Bearer sk-hygiene-test"}
BOM = b"\xef\xbb\xbf"


def body(stream: bool = True) -> dict[str, object]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


# -- logged bodies ------------------------------------------------------------------


@pytest.mark.usefixtures("root_logging")
def test_log_bodies_never_logs_credentials_in_the_body(
    upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("info", "json", [])
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "marker-visible-content"}],
        "api_key": "plainkey-1234567890",
        "metadata": {"token": "tok-abcdef123456", "user": "u-7"},
    }
    config = route_config(upstream, top={"server": {"log_bodies": True}})
    with running_proxy(config) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body, headers=KEY, timeout=30)
        assert r.status_code == 200
    err = capsys.readouterr().err
    assert "plainkey-1234567890" not in err
    assert "tok-abcdef123456" not in err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    logged = [line["body"] for line in lines if line.get("msg") == "request"]
    assert len(logged) == 1  # the body was logged, with its credentials replaced
    assert logged[0]["messages"][0]["content"] == "marker-visible-content"
    assert logged[0]["api_key"] == REDACTED
    assert logged[0]["metadata"] == {"token": REDACTED, "user": "u-7"}
    # the upstream still gets the body the client sent
    assert upstream.chat_requests()[0].json["api_key"] == "plainkey-1234567890"


# -- a byte-order mark before the upstream's first event ----------------------------


@pytest.mark.parametrize(
    "first",
    [
        [BOM + sse(chunk({"content": "<think>why</think>First"}))],
        # the mark alone in the upstream's first write, then the rest of it
        [BOM[:1], BOM[1:] + sse(chunk({"content": "<think>why</think>First"}))],
    ],
    ids=["with-the-event", "split"],
)
def test_a_leading_bom_from_the_upstream_does_not_drop_the_first_event(
    upstream: FakeUpstream, first: list[bytes]
) -> None:
    upstream.script(Stream([*first, chunk({"content": " answer"}), chunk({}, "stop")], delay=0.05))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/chat/completions", json=body(), headers=KEY, timeout=30)
        assert r.status_code == 200
        assert BOM not in r.content
        client = read_stream(r.content)
        assert client["content"] == "First answer"
        assert client["reasoning"] == "why"
        assert client["done"]
        assert not client["errors"]
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}", headers=KEY
        ).json()
        assert stored["turns"][0]["content"] == "First answer"
        assert stored["turns"][0]["complete"] is True


# -- X-Conversation-Id sent twice ---------------------------------------------------


def test_two_different_conversation_ids_are_a_400_and_nothing_goes_upstream(
    upstream: FakeUpstream,
) -> None:
    headers = [
        *KEY.items(),
        ("X-Conversation-Id", "conv-alpha"),
        ("X-Conversation-Id", "conv-beta"),
    ]
    with running_proxy(route_config(upstream)) as proxy:
        for stream in (True, False):
            r = httpx.post(
                f"{proxy.url}/chat/completions", json=body(stream), headers=headers, timeout=30
            )
            assert r.status_code == 400
            error = r.json()["error"]
            assert error["code"] == "invalid_conversation_id"
            assert error["param"] == "X-Conversation-Id"
            assert error["type"] == "invalid_request_error"
            assert "X-Conversation-Id" in error["message"]
            assert "conv-alpha" not in r.text
            assert "conv-beta" not in r.text
    assert upstream.requests == []


def test_the_same_conversation_id_twice_is_accepted(upstream: FakeUpstream) -> None:
    headers = [
        *KEY.items(),
        ("X-Conversation-Id", "conv-same"),
        ("X-Conversation-Id", "conv-same"),
    ]
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions", json=body(False), headers=headers, timeout=30
        )
        assert r.status_code == 200
        assert r.headers["x-conversation-id"] == "conv-same"
        stored = httpx.get(f"{proxy.url}/conversations/conv-same", headers=KEY, timeout=30)
        assert stored.status_code == 200
        assert len(stored.json()["turns"]) == 1
    assert len(upstream.chat_requests()) == 1
    assert "x-conversation-id" not in upstream.chat_requests()[0].headers
