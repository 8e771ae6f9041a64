"""The front doors read a gzip or deflate request body decoded, through a
real server, as the pass-through does: the upstream gets the decoded (and
rewritten) body without the Content-Encoding header; another encoding is a
415 and a body that decodes past limits.max_body_bytes a 413, each in the
door's own error shape, nothing sent.

Regression: a door parsed the compressed bytes as JSON, so a gzip body was
a 400 `invalid_json` ("str is not valid UTF-8: surrogates not allowed")
that did not say why."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, running_proxy

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}

# (door path, body, model prefix of the route it goes to, upstream path)
SENT = [
    ("chat/completions", CHAT, "", "/v1/chat/completions"),
    ("messages", MESSAGES, "", "/v1/chat/completions"),
    ("messages", MESSAGES, "anth-", "/v1/messages"),
    ("messages/count_tokens", MESSAGES, "anth-", "/v1/messages/count_tokens"),
    ("responses", RESPONSES, "", "/v1/chat/completions"),
    ("responses", RESPONSES, "resp-", "/v1/responses"),
    ("responses/input_tokens", RESPONSES, "resp-", "/v1/responses/input_tokens"),
    ("responses/compact", RESPONSES, "resp-", "/v1/responses/compact"),
]
DOORS = [
    ("chat/completions", CHAT),
    ("messages", MESSAGES),
    ("messages/count_tokens", MESSAGES),
    ("responses", RESPONSES),
    ("responses/input_tokens", RESPONSES),
]


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    url = upstream_server.url
    config = {
        "routes": [
            {
                "name": "resp",
                "models": ["resp-*"],
                "upstream": url,
                "api": "responses",
            },
            {
                "name": "anth",
                "models": ["anth-*"],
                "upstream": url,
                "api": "messages",
            },
            {"name": "chat", "models": ["*"], "upstream": url},
        ],
        "limits": {"max_body_bytes": 1_000_000},
    }
    with running_proxy(config) as server:
        yield server


def post(proxy: ProxyServer, path: str, body: bytes, encoding: str) -> httpx.Response:
    headers = {
        "Authorization": "Bearer sk-client-key",
        "Content-Type": "application/json",
        "Content-Encoding": encoding,
    }
    return httpx.post(f"{proxy.url}/{path}", content=body, headers=headers, timeout=10)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity, gzip"])
@pytest.mark.parametrize(
    ("path", "body", "prefix", "upstream_path"),
    SENT,
    ids=[f"{path}-{prefix or 'chat-'}route" for path, _, prefix, _ in SENT],
)
def test_a_compressed_body_is_read_and_sent_decoded(
    upstream: FakeUpstream,
    proxy: ProxyServer,
    encoding: str,
    path: str,
    body: dict[str, object],
    prefix: str,
    upstream_path: str,
) -> None:
    upstream.reset()
    if upstream_path.endswith(("count_tokens", "input_tokens")):  # the upstream counts
        upstream.script(Json({"object": "response.input_tokens", "input_tokens": 5}))
    plain = json.dumps({**body, "model": prefix + "m"}).encode()
    data = zlib.compress(plain) if encoding == "deflate" else gzip.compress(plain)
    r = post(proxy, path, data, encoding)
    assert r.status_code == 200, r.text
    (sent,) = upstream.requests
    assert sent.path == upstream_path
    assert "Content-Encoding" not in sent.headers
    assert sent.json["model"] == prefix + "m"  # the decoded body, as JSON


@pytest.mark.parametrize(("path", "body"), DOORS, ids=[path for path, _ in DOORS])
@pytest.mark.parametrize(
    ("encoding", "status", "code"),
    [
        ("br", 415, "unsupported_content_encoding"),
        ("gzip, gzip", 415, "unsupported_content_encoding"),
        ("corrupt", 400, "invalid_content_encoding"),
        ("bomb", 413, "request_too_large"),
    ],
)
def test_a_body_not_read_here_is_refused_in_the_doors_shape(
    upstream: FakeUpstream,
    proxy: ProxyServer,
    path: str,
    body: dict[str, object],
    encoding: str,
    status: int,
    code: str,
) -> None:
    upstream.reset()
    plain = json.dumps(body).encode()
    if encoding == "corrupt":
        encoding, data = "gzip", b"\x1f\x8b\x08\x00not gzip at all"
    elif encoding == "bomb":  # 49 KB that decode to 50 MB
        encoding, data = "gzip", gzip.compress(plain + b" " * 50_000_000)
    else:
        data = gzip.compress(plain)
    r = post(proxy, path, data, encoding)
    assert r.status_code == status, r.text
    if status == 415:
        assert r.headers["Accept-Encoding"] == "gzip, deflate"
    if path.startswith("messages"):
        kind = "request_too_large" if status == 413 else "invalid_request_error"
        assert r.json() == {
            "type": "error",
            "error": {"type": kind, "message": r.json()["error"]["message"]},
        }
    else:
        assert r.json()["error"]["code"] == code
        assert "param" in r.json()["error"]
    assert upstream.requests == []
