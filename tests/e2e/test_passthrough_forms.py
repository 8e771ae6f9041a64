"""Pass-through routes a multipart upload by its `model` form field, through
a real server: the openai SDK's audio transcription goes to its model's
route, a model no route serves is the same 404 as for a JSON body, and the
form goes on byte for byte.

Regression: a multipart body named no model to the proxy, so it went to the
default route (with that route's key) whatever model its form field named,
past the routes' model globs."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.e2e.test_reliability import CHEAP_KEY, KEY, restricted_routes
from tests.harness import FakeUpstream, Json, running_proxy

AUDIO = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(256)) * 16
BOUNDARY = "form-boundary-7d1"


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    """`cheap-*` (the default route, with a route key) and `other-*`."""
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    yield cheap, other
    cheap.stop()
    other.stop()


def transcribe(url: str, model: str) -> str:
    client = openai.OpenAI(base_url=url, api_key="sk-client-key", max_retries=0)
    with client:
        result = client.audio.transcriptions.create(model=model, file=("speech.wav", AUDIO))
    return result.text


def test_the_sdks_transcription_goes_to_its_models_route(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    other.script(Json({"text": "from other"}))
    cheap.script(Json({"text": "from cheap"}))
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        assert transcribe(proxy.url, "other-whisper") == "from other"
        assert transcribe(proxy.url, "cheap-whisper") == "from cheap"
    (sent,) = other.requests
    assert sent.path == "/v1/audio/transcriptions"
    assert sent.headers["Authorization"] == "Bearer sk-client-key"
    assert sent.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert b'name="model"\r\n\r\nother-whisper\r\n' in sent.body
    assert AUDIO in sent.body
    (routed,) = cheap.requests
    assert routed.headers["Authorization"] == f"Bearer {CHEAP_KEY}"
    assert b'name="model"\r\n\r\ncheap-whisper\r\n' in routed.body


def test_the_sdks_transcription_for_a_model_no_route_serves_is_404(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    with (
        running_proxy(restricted_routes(cheap, other)) as proxy,
        pytest.raises(openai.NotFoundError) as refused,
    ):
        transcribe(proxy.url, "expensive-whisper")
    assert refused.value.code == "model_not_found"
    assert refused.value.param == "model"
    assert cheap.requests == []
    assert other.requests == []


def form(*parts: tuple[str, bytes], nl: bytes = b"\r\n", preamble: bytes = b"") -> bytes:
    dash = b"--" + BOUNDARY.encode()
    out = preamble
    for disposition, content in parts:
        out += dash + nl + b"Content-Disposition: " + disposition.encode() + nl + nl
        out += content + nl
    return out + dash + b"--" + nl


def post(proxy_url: str, body: bytes, content_type: str | None = None) -> httpx.Response:
    headers = {**KEY, "Content-Type": content_type or f"multipart/form-data; boundary={BOUNDARY}"}
    return httpx.post(f"{proxy_url}/audio/translations", content=body, headers=headers, timeout=30)


def test_the_form_goes_on_byte_for_byte(upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    cheap, other = upstreams
    body = form(
        ('form-data; name="file"; filename="a.wav"', AUDIO),
        ("form-data; name=model", b"other-whisper"),
        nl=b"\n",
        preamble=b"a preamble, LF line ends\n",
    )
    content_type = f'Multipart/Form-Data; boundary="{BOUNDARY}"'
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, body, content_type)
    assert r.status_code == 200, r.text
    (sent,) = other.requests
    assert sent.body == body
    assert sent.headers["Content-Type"] == content_type
    assert cheap.requests == []


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (form(('form-data; name="model"', b"expensive-whisper")), None),
        # the field in RFC 2231 form, as Go's mime package reads it
        (form(("form-data; name*=utf-8''%6Dodel", b"expensive-whisper")), None),
        # after a file whose content holds a close that is not one
        (
            form(
                ('form-data; name="file"; filename="a"', b"x\n--" + BOUNDARY.encode() + b"--"),
                ('form-data; name="model"', b"expensive-whisper"),
            ),
            None,
        ),
        (
            form(('form-data; name="model"', b"expensive-whisper")),
            f'multipart/form-data; boundary="{BOUNDARY}"',
        ),
    ],
    ids=["plain", "rfc2231-name", "after-a-false-close", "quoted-boundary"],
)
def test_a_form_for_a_model_no_route_serves_is_404(
    upstreams: tuple[FakeUpstream, FakeUpstream], body: bytes, content_type: str | None
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, body, content_type)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "model_not_found"
    assert cheap.requests == []
    assert other.requests == []


@pytest.mark.parametrize(
    "body",
    [
        # servers differ on which of two counts: neither is guessed
        form(('form-data; name="model"', b"other-whisper"), ("form-data; name=model", b"x-1")),
        form(('form-data; name="model"\r\nContent-Transfer-Encoding: base64', b"b3RoZXI=")),
        form(('form-data; name="model"', b"other-" + b"w" * 9000)),
    ],
    ids=["two-models", "base64", "longer-than-max-header-bytes"],
)
def test_a_model_field_not_read_here_is_a_400(
    upstreams: tuple[FakeUpstream, FakeUpstream], body: bytes
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_form"
    assert r.json()["error"]["param"] == "model"
    assert cheap.requests == []
    assert other.requests == []


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (form(('form-data; name="purpose"', b"batch")), None),
        # a model header inside a file is the file's content
        (
            form(
                (
                    'form-data; name="file"; filename="a"',
                    b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nexpensive\r\n',
                )
            ),
            None,
        ),
        (form(('form-data; name="model"', b"expensive-whisper")), "multipart/form-data"),
        (form(('form-data; name="model"', b"expensive-whisper")), "text/plain"),
    ],
    ids=["no-model-field", "model-in-a-file", "no-boundary", "not-multipart"],
)
def test_a_body_naming_no_model_goes_to_the_default_route(
    upstreams: tuple[FakeUpstream, FakeUpstream], body: bytes, content_type: str | None
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        r = post(proxy.url, body, content_type)
    assert r.status_code == 200, r.text
    (sent,) = cheap.requests
    assert sent.body == body
    assert sent.headers["Authorization"] == f"Bearer {CHEAP_KEY}"
    assert other.requests == []
