"""The pass-through keeps the upstream's Content-Length where the client
gets the body it counts, through a real server: a `HEAD`'s, and a body
passed on as it came (the openai SDK's streamed `audio.speech`). A body the
upstream cuts short then reads as cut (fewer bytes than announced). Where
the proxy changes the body (a route key masked in it, a gzip body decoded)
the server frames it, and a 204 or 304 carries none.

Regression: every pass-through answer lost its Content-Length: a `HEAD`
told no size, and a download's size was unknown until its end."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

AUDIO = bytes(range(256)) * 4096  # 1 MiB of "mp3"
KEY = {"Authorization": "Bearer sk-client-key"}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def audio(**kw: object) -> Json:
    return Json(AUDIO, headers={"Content-Type": "audio/mpeg"}, **kw)  # type: ignore[arg-type]


def test_a_body_passed_on_as_it_came_keeps_its_length(upstream: FakeUpstream) -> None:
    upstream.script(audio(), audio())
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-client-key", max_retries=0)
        with (
            client,
            client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input="hello"
            ) as speech,
        ):
            assert speech.headers["Content-Length"] == str(len(AUDIO))
            assert "Transfer-Encoding" not in speech.headers
            assert speech.read() == AUDIO
        head = httpx.head(f"{proxy.url}/files/file-1/content", headers=KEY, timeout=10)
    assert head.status_code == 200
    assert head.headers["Content-Length"] == str(len(AUDIO))
    assert head.content == b""
    assert [r.method for r in upstream.requests] == ["POST", "HEAD"]


def test_a_body_cut_short_reads_as_cut(upstream: FakeUpstream) -> None:
    upstream.script(audio(cut_at=100_000))
    with running_proxy(route_config(upstream)) as proxy:
        body = {"model": "tts-1", "voice": "alloy", "input": "hello"}
        with httpx.stream(
            "POST", f"{proxy.url}/audio/speech", json=body, headers=KEY, timeout=10
        ) as r:
            assert r.headers["Content-Length"] == str(len(AUDIO))
            with pytest.raises(httpx.RemoteProtocolError, match="expected 1048576"):
                r.read()


def test_a_body_changed_on_the_way_is_framed_by_the_server(upstream: FakeUpstream) -> None:
    packed = gzip.compress(AUDIO)
    upstream.script(
        Json(packed, headers={"Content-Type": "audio/mpeg", "Content-Encoding": "gzip"}),
        audio(),
        Json(b"", status=204),
    )
    config = route_config(upstream)
    with running_proxy(config) as proxy:
        decoded = httpx.get(f"{proxy.url}/files/file-1/content", headers=KEY, timeout=10)
    assert decoded.content == AUDIO
    assert "Content-Length" not in decoded.headers
    assert "Content-Encoding" not in decoded.headers
    with running_proxy(route_config(upstream, api_key="sk-route-key-0123456789")) as proxy:
        masked = httpx.post(f"{proxy.url}/audio/speech", json={"model": "m"}, timeout=10)
        empty = httpx.delete(f"{proxy.url}/vector_stores_x/1", timeout=10)
    assert masked.content == AUDIO
    assert "Content-Length" not in masked.headers
    assert empty.status_code == 204
    assert "Content-Length" not in empty.headers
    assert "Transfer-Encoding" not in empty.headers
