"""DNS rebinding: a web page that points its own name at 127.0.0.1 is
same-origin to the browser, so the Origin check does not stop it. Its
requests carry its own name as `Host`; on a loopback address the proxy
serves a browser's requests only for names no page can own. (The same page
in a real Chromium: tests/ui/test_rebinding.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_demo, running_proxy

ANSWER = Json({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
# what a browser's fetch carries whatever the page does: it cannot set or
# drop Sec-Fetch-*; older browsers are known by their User-Agent
BROWSERS = (
    {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
    {"User-Agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15"},
)
CHROME = BROWSERS[0]


@pytest.mark.parametrize("browser", BROWSERS)
def test_a_rebound_page_can_neither_spend_the_key_nor_read_conversations(
    upstream: FakeUpstream, browser: dict[str, str]
) -> None:
    config = route_config(upstream, api_key="sk-route-key-rebind")
    with running_proxy(config) as proxy:
        port = proxy.port
        evil = {**browser, "Host": f"evil.example:{port}"}
        spent = httpx.post(
            f"{proxy.url}/chat/completions",
            content=orjson.dumps(CHAT),
            headers={**evil, "Content-Type": "text/plain"},
        )
        # a POST from the page's own origin carries it as Origin
        posted = httpx.post(
            f"{proxy.url}/chat/completions",
            json=CHAT,
            headers={**evil, "Origin": f"http://evil.example:{port}"},
        )
        read = httpx.get(f"{proxy.url}/conversations", headers=evil)
        page = httpx.get(f"{proxy.base}/ui", headers=evil)
        passed = httpx.get(f"{proxy.url}/files", headers=evil)
        assert upstream.requests == []
        # the names a user types are served
        served = []
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"app.localhost:{port}"):
            upstream.script(ANSWER)
            served.append(
                httpx.post(
                    f"{proxy.url}/chat/completions", json=CHAT, headers={**browser, "Host": host}
                )
            )
    for refused in (spent, posted, read, page, passed):
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden_host"
        assert "server.allowed_hosts" in refused.json()["error"]["message"]
    assert [r.status_code for r in served] == [200, 200, 200]
    assert len(upstream.requests) == 3


def test_clients_that_are_not_browsers_may_name_any_host(upstream: FakeUpstream) -> None:
    """No page can make a request without a browser's headers: SDKs, agents
    and raw HTTP with any `Host` are served."""
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(ANSWER)
        oai = openai.OpenAI(
            base_url=proxy.url,
            api_key="sk-test",
            default_headers={"Host": f"proxy:{proxy.port}"},
            max_retries=0,
        )
        answer = oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
            head = sock.recv(4096)
    assert answer.choices[0].message.content == "ok"
    assert head.startswith(b"HTTP/1.1 200")


def test_the_sdks_get_the_refusal_in_their_own_shape(upstream: FakeUpstream) -> None:
    """Once names are listed, every request must use one."""
    listed = route_config(upstream, top={"server": {"allowed_hosts": ["proxy.internal"]}})
    with running_proxy(listed) as proxy:
        other = {"Host": f"other.internal:{proxy.port}"}
        oai = openai.OpenAI(
            base_url=proxy.url, api_key="sk-test", default_headers=other, max_retries=0
        )
        with pytest.raises(openai.PermissionDeniedError) as refused:
            oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        claude = anthropic.Anthropic(
            base_url=proxy.base, api_key="sk-test", default_headers=other, max_retries=0
        )
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            claude.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
    assert upstream.requests == []
    assert refused.value.code == "forbidden_host"
    body = denied.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "permission_error"


def test_once_names_are_listed_only_they_are_served(upstream: FakeUpstream) -> None:
    listed = route_config(upstream, top={"server": {"allowed_hosts": ["proxy.internal"]}})
    with running_proxy(listed) as proxy:
        upstream.script(ANSWER)
        named = httpx.post(
            f"{proxy.url}/chat/completions",
            json=CHAT,
            headers={"Host": f"proxy.internal:{proxy.port}"},
        )
        other = httpx.post(
            f"{proxy.url}/chat/completions",
            json=CHAT,
            headers={"Host": f"other.internal:{proxy.port}"},
        )
    assert named.status_code == 200
    assert other.status_code == 403
    assert len(upstream.requests) == 1


def this_machines_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith(("127.", "0.")) else address


def test_on_every_address_a_name_is_checked_only_on_loopback(upstream: FakeUpstream) -> None:
    """Listening on every address (a container): a compose service or a
    LAN client may use any name; a page rebound to 127.0.0.1 still may not."""
    address = this_machines_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    with running_proxy(route_config(upstream), host="0.0.0.0") as proxy:
        upstream.script(ANSWER)
        compose = httpx.post(
            f"http://{address}:{proxy.port}/v1/chat/completions",
            json=CHAT,
            headers={**CHROME, "Host": f"proxy:{proxy.port}"},
        )
        rebound = httpx.post(
            f"{proxy.url}/chat/completions",
            json=CHAT,
            headers={**CHROME, "Host": f"proxy:{proxy.port}"},
        )
    assert compose.status_code == 200
    assert rebound.status_code == 403
    assert len(upstream.requests) == 1


def test_the_demo_refuses_a_rebound_name(tmp_path: Path) -> None:
    with running_demo(tmp_path / "demo.log") as base:
        port = base.rsplit(":", 1)[1]
        ok = httpx.get(f"{base}/v1/conversations", headers=CHROME)
        refused = httpx.get(
            f"{base}/v1/conversations", headers={**CHROME, "Host": f"evil.example:{port}"}
        )
    assert ok.status_code == 200
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden_host"
