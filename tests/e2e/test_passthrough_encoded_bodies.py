"""Pass-through routes a compressed request body by the `model` it decodes
to, through a real server: a gzip or deflate body goes to its model's route
(still compressed, as it came), a model no route serves is the same 404 as
for a plain body, and an encoding the proxy cannot read is a 415, nothing
sent.

Regression: a `Content-Encoding: gzip` body named no model to the proxy, so
it went to the default route (with that route's key) whatever model it
named, past the routes' model globs, to an upstream that may decode it."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.test_reliability import CHEAP_KEY, restricted_routes
from tests.harness import FakeUpstream, Json, running_proxy

BODY = b'{"model": "other-embed", "input": "hello"}'
UNSERVED = b'{"model": "expensive-o1-pro", "input": "hello"}'


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    """`cheap-*` (the default route, with a route key) and `other-*`."""
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    yield cheap, other
    cheap.stop()
    other.stop()


def post(url: str, body: bytes, encoding: str) -> httpx.Response:
    headers = {
        "Authorization": "Bearer sk-client-key",
        "Content-Type": "application/json",
        "Content-Encoding": encoding,
    }
    return httpx.post(url + "/embeddings", content=body, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "encoding",
    [
        "gzip",
        "deflate",
        "identity, GZIP",
    ],
    ids=["gzip", "deflate", "identity-then-gzip"],
)
def test_a_compressed_body_goes_to_its_models_route(
    upstreams: tuple[FakeUpstream, FakeUpstream], encoding: str
) -> None:
    cheap, other = upstreams
    body = zlib.compress(BODY) if encoding == "deflate" else gzip.compress(BODY)
    other.script(Json({"object": "list", "data": []}))
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, body, encoding)
    assert r.status_code == 200, r.text
    assert cheap.requests == []
    (sent,) = other.requests
    # sent compressed, as it came: the upstream (aiohttp, as many servers)
    # decodes what it knows itself, which is why its model must route it
    assert sent.headers["Content-Encoding"] == encoding
    assert sent.body in (body, BODY)


def test_a_compressed_body_for_a_model_no_route_serves_is_404(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, gzip.compress(UNSERVED), "gzip")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "model_not_found"
    assert cheap.requests == []
    assert other.requests == []


@pytest.mark.parametrize(
    ("encoding", "body", "status", "code"),
    [
        ("br", b"\x1b\x2c\x00\xf8" + UNSERVED, 415, "unsupported_content_encoding"),
        ("gzip, gzip", gzip.compress(gzip.compress(UNSERVED)), 415, "unsupported_content_encoding"),
        ("gzip", b"\x1f\x8b\x08\x00not gzip at all", 400, "invalid_content_encoding"),
        ("gzip", gzip.compress(b" " * 2_000_000 + UNSERVED), 413, "request_too_large"),
    ],
    ids=["brotli", "twice", "corrupt", "past-max-body-bytes"],
)
def test_a_body_not_read_here_is_refused_and_not_sent(
    upstreams: tuple[FakeUpstream, FakeUpstream],
    encoding: str,
    body: bytes,
    status: int,
    code: str,
) -> None:
    cheap, other = upstreams
    config = {**restricted_routes(cheap, other), "limits": {"max_body_bytes": 1_000_000}}
    with running_proxy(config) as proxy:
        r = post(proxy.url, body, encoding)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    if status == 415:
        assert r.headers["Accept-Encoding"] == "gzip, deflate"
    assert cheap.requests == []
    assert other.requests == []


def test_a_plain_body_under_identity_is_read_as_it_is(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    cheap.script(Json({"object": "list", "data": []}))
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, b'{"model": "cheap-embed", "input": "x"}', "identity")
    assert r.status_code == 200, r.text
    (sent,) = cheap.requests
    assert sent.headers["Authorization"] == f"Bearer {CHEAP_KEY}"
