"""Only the config chooses the upstream and its path, tried from outside
with raw request lines (absolute-form targets, Host and X-Forwarded-*
headers, doubled slashes, escapes) against a route with a path prefix; and
one key is one tenant whichever header carries it, another key's data
looking like an unknown id."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy

ROUTE_KEY = "rk-lane-target-0123456789"


def exchange(port: int, head: str, body: bytes) -> bytes:
    """One request on a raw socket (the request line as written), the answer's status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def request_head(target: str, body: bytes) -> str:
    return (
        f"POST {target} HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-Host: evil.example\r\n"
        "X-Forwarded-Proto: https\r\nX-Forwarded-Prefix: /other\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("target", "sent"),
    [
        ("http://evil.example/v1/chat/completions", "/api/v1/chat/completions"),
        ("http://127.0.0.1:1/v1/embeddings", "/api/v1/embeddings"),
        ("/v1//evil.example/x", "/api/v1//evil.example/x"),
        ("/v1/@evil.example/x", "/api/v1/@evil.example/x"),
        ("/v1/x/%2F%2Fevil.example", "/api/v1/x///evil.example"),
        ("/v1/x?u=/../../admin", "/api/v1/x"),
        ("/v1/x/%2e%2e/%2e%2e/admin", None),
        ("/v1/x/..%2F..%2Fadmin", None),
        ("/v1/x/%252e%252e/admin", None),
        ("/v1/x/..;/admin", None),
        ("/v1/x\\..\\admin", None),
        ("//evil.example/v1/x", None),
    ],
)
def test_no_request_leaves_the_route_or_its_prefix(
    upstream: FakeUpstream, target: str, sent: str | None
) -> None:
    config = route_config(upstream, api_key=ROUTE_KEY)
    config["routes"][0]["upstream"] = upstream.url.replace("/v1", "/api/v1")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with running_proxy(config) as proxy:
        status = exchange(proxy.port, request_head(target, body), body)
    if sent is None:
        assert status.split(b" ")[1] in (b"400", b"404"), status
        assert upstream.requests == []
        return
    assert status.split(b" ")[1] == b"200", status
    (received,) = upstream.requests  # the configured host: nothing else answers
    assert received.path == sent
    assert received.headers["host"] == f"127.0.0.1:{upstream.port}"


CONVERSATION = {"X-Conversation-Id": "lane-tenant"}


def test_one_key_is_one_tenant_in_every_spelling_and_others_see_nothing(
    upstream: FakeUpstream,
) -> None:
    key, other = "lane-tenant-key-A1", "lane-tenant-key-B2"
    config = route_config(
        upstream, api_key=ROUTE_KEY, top={"server": {"admin_token": "adm-0123456789"}}
    )
    with running_proxy(config) as proxy:
        made = httpx.post(
            f"{proxy.url}/chat/completions",
            headers={"Authorization": f"Bearer {key}", **CONVERSATION},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert made.status_code == 200
        url = f"{proxy.url}/conversations/lane-tenant"
        same = [
            {"Authorization": f"Bearer {key}"},
            {"Authorization": f"bearer   {key}"},
            {"Authorization": f"Bearer\t{key}"},
            {"x-api-key": key},
            {"Authorization": "", "x-api-key": key},
        ]
        for headers in same:
            assert httpx.get(url, headers=headers).status_code == 200, headers
        others = [
            {},  # anonymous
            {"Authorization": f"Bearer {other}"},
            {"Authorization": f"Bearer {other}", "x-api-key": key},  # Authorization wins
            {"Authorization": "Bearer", "x-api-key": key},  # a scheme alone is no key
            {"Authorization": f"Bearer {key}x"},
            {"Authorization": f"Bearer {key[:-1]}"},
            {"Authorization": f"Bearer {key}".encode() + b"\xe9"},  # a byte past ASCII
            {"x-api-key": "adm-0123456789"},  # the admin token counts only as Authorization
        ]
        for headers in others:
            assert httpx.get(url, headers=headers).status_code == 404, headers
            listed = httpx.get(f"{proxy.url}/conversations", headers=headers).json()["data"]
            assert listed == [], headers
            gone = httpx.delete(url, headers=headers)
            assert gone.status_code == 404
            # a tenant named in the query is the admin's to choose only
            tenant = httpx.get(
                f"{proxy.url}/conversations?tenant=anything", headers=headers
            ).json()["data"]
            assert tenant == []
        admin = {"Authorization": "Bearer adm-0123456789"}
        everyone = httpx.get(f"{proxy.url}/conversations", headers=admin).json()["data"]
        assert [c["id"] for c in everyone] == ["lane-tenant"]
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 200
