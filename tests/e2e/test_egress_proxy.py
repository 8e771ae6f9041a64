"""End to end through an egress proxy: the proxy server (uvicorn, a real
socket) sends a route's requests through a small CONNECT proxy
(tests/http1_servers.py: ForwardProxy, run in a thread) to an HTTPS fake
upstream whose name only the CONNECT proxy knows, with the openai SDK as the
client. The upstream's certificate is for that name, from a test CA the
proxy trusts through SSL_CERT_FILE."""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme
from openai.types.chat import ChatCompletionMessageParam

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, running_proxy
from tests.http1_servers import ForwardProxy

NAME = "fake-upstream.test"
ROUTE_KEY = "sk-route-key-for-the-upstream"


@contextmanager
def forward_proxy_thread(hosts: dict[str, tuple[str, int]]) -> Iterator[ForwardProxy]:
    """A ForwardProxy on its own event loop, in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = ForwardProxy(hosts)
    asyncio.run_coroutine_threadsafe(proxy.start(), loop).result(10)
    try:
        yield proxy
    finally:
        asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def upstream(
    tls_ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeUpstream]:
    """An HTTPS fake upstream with a certificate for NAME, trusted by the proxy."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert(NAME).configure_cert(server)
    tls_ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    fake = FakeUpstream(tls=server).start()
    try:
        yield fake
    finally:
        fake.stop()


def config(proxy_port: int | None, **server: Any) -> dict[str, Any]:
    route: dict[str, Any] = {
        "name": "behind-the-proxy",
        "models": ["*"],
        "upstream": f"https://{NAME}/v1",
        "api_key": ROUTE_KEY,
    }
    if proxy_port is not None:
        route["upstream_proxy"] = f"http://127.0.0.1:{proxy_port}"
    return {"routes": [route], "server": server}


def answer(text: str) -> Json:
    return Json(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    )


@contextmanager
def sdk_for(url: str) -> Iterator[openai.OpenAI]:
    """The openai SDK, closed at the end (its connections with it)."""
    client = openai.OpenAI(base_url=url, api_key="sk-client", max_retries=0)
    try:
        yield client
    finally:
        client.close()


def tunnels(fwd: ForwardProxy) -> int:
    """CONNECTs to the upstream (other code in the process, the tokenizer's
    download, may use the environment's proxy for its own hosts)."""
    return sum(h.startswith(f"CONNECT {NAME}:443 ".encode()) for h in fwd.heads)


CLIENTS = ["builtin"] + (["aiohttp"] if importlib.util.find_spec("aiohttp") else [])


HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_chat_completion_through_a_connect_proxy(upstream: FakeUpstream, client: str) -> None:
    upstream.script(
        answer("through the tunnel"),
        Stream([chunk({"content": "<think>hmm</think>streamed"}), chunk({}, "stop")]),
    )
    with (
        forward_proxy_thread({f"{NAME}:443": ("127.0.0.1", upstream.port)}) as fwd,
        running_proxy(config(fwd.port, upstream_client=client)) as proxy,
        sdk_for(proxy.url) as sdk,
    ):
        done = sdk.chat.completions.create(model="m", messages=HI)
        assert done.choices[0].message.content == "through the tunnel"
        stream = sdk.chat.completions.create(model="m", messages=HI, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "streamed"
        assert [h.split(b"\r\n")[0] for h in fwd.heads] == [
            b"CONNECT fake-upstream.test:443 HTTP/1.1"
        ]
        assert ROUTE_KEY.encode() not in fwd.tunneled
    sent = upstream.chat_requests()
    assert len(sent) == 2
    assert {r.headers["Authorization"] for r in sent} == {f"Bearer {ROUTE_KEY}"}
    assert {r.headers["Host"] for r in sent} == {NAME}


def test_the_environments_proxy_only_with_trust_env(
    upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    with forward_proxy_thread({f"{NAME}:443": ("127.0.0.1", upstream.port)}) as fwd:
        for name in ("HTTPS_PROXY", "https_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{fwd.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        # trust_env false: direct, and no such host
        with running_proxy(config(None)) as proxy, sdk_for(proxy.url) as sdk:
            with pytest.raises(openai.APIStatusError) as failed:
                sdk.chat.completions.create(model="m", messages=HI)
            assert failed.value.status_code == 502
            assert tunnels(fwd) == 0
        upstream.script(answer("via the environment"))
        with running_proxy(config(None, trust_env=True)) as proxy, sdk_for(proxy.url) as sdk:
            done = sdk.chat.completions.create(model="m", messages=HI)
            assert done.choices[0].message.content == "via the environment"
            assert tunnels(fwd) == 1
        monkeypatch.setenv("NO_PROXY", NAME)
        with running_proxy(config(None, trust_env=True)) as proxy, sdk_for(proxy.url) as sdk:
            with pytest.raises(openai.APIStatusError):  # direct again: no such host
                sdk.chat.completions.create(model="m", messages=HI)
            assert tunnels(fwd) == 1
