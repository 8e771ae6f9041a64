"""A gzip or deflate request body whose compressed data stops before its end
is refused as one that does not decode (400 `invalid_content_encoding`),
even when the bytes that did decode are a whole JSON object: nothing goes
upstream. Real server, fake upstream."""

from __future__ import annotations

import json
import zlib

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def cut_after_the_object(wbits: int) -> bytes:
    """The object, flushed whole, then padding whose compressed data is cut."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    head = compressor.compress(json.dumps(CHAT).encode()) + compressor.flush(zlib.Z_SYNC_FLUSH)
    tail = compressor.compress(b" " * 1000) + compressor.flush()
    return head + tail[: len(tail) // 2]


@pytest.mark.parametrize(
    ("encoding", "wbits"), [("gzip", 16 + zlib.MAX_WBITS), ("deflate", zlib.MAX_WBITS)]
)
def test_a_request_body_cut_before_its_compressed_end_is_refused(
    upstream: FakeUpstream, encoding: str, wbits: int
) -> None:
    upstream.script(Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}))
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            content=cut_after_the_object(wbits),
            headers={
                "Authorization": "Bearer sk-client",
                "Content-Type": "application/json",
                "Content-Encoding": encoding,
            },
            timeout=30,
        )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_content_encoding"
    assert upstream.requests == []
