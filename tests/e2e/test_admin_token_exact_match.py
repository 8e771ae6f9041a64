"""The admin token is refused where it would go upstream when a credential
IS the token (`Bearer <token>`, an `x-api-key` or cookie of it, a `Basic`
password of it, a query parameter of it), through a real server; a client
key that merely contains a short admin token goes on as it came.

Regression: the token was looked for as any substring of a credential
header or of the query, so a client whose own key happened to contain the
admin token (`sk-admin-1234` under the token `adm`) got a 403
`admin_token_not_forwarded`."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy

ADMIN = "adm"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(
        route_config(upstream_server, top={"server": {"admin_token": ADMIN}})
    ) as server:
        yield server


def test_a_key_that_contains_the_token_goes_on(upstream: FakeUpstream, proxy: ProxyServer) -> None:
    upstream.reset()
    oai = openai.OpenAI(base_url=proxy.url, api_key="sk-admin-1234", max_retries=0)
    oai.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    oai.responses.create(model="m", input="hi")
    claude = anthropic.Anthropic(base_url=proxy.base, api_key="sk-badm-5678", max_retries=0)
    claude.messages.create(model="m", max_tokens=5, messages=MESSAGES)  # type: ignore[arg-type]
    files = httpx.get(f"{proxy.url}/files?key=madmax", headers={"Cookie": "s=admin"})
    assert files.status_code == 200, files.text
    sent = [r.headers.get("authorization") or r.headers.get("x-api-key") for r in upstream.requests]
    assert sent[:3] == ["Bearer sk-admin-1234", "Bearer sk-admin-1234", "Bearer sk-badm-5678"]
    assert upstream.requests[3].query == "key=madmax"


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"Authorization": f"Bearer {ADMIN}"}, ""),
        ({"Authorization": f"bearer\t {ADMIN}"}, ""),
        ({"Authorization": ADMIN}, ""),
        ({"x-api-key": ADMIN}, ""),
        ({"api-key": f"sk-other, {ADMIN}"}, ""),
        ({"Cookie": f"a=b; session={ADMIN}"}, ""),
        ({"Authorization": "Basic " + base64.b64encode(f"user:{ADMIN}".encode()).decode()}, ""),
        ({"Authorization": "Bearer sk-x"}, f"key={ADMIN}"),
        ({"Authorization": "Bearer sk-x"}, "api_key=%61dm"),
        ({"Authorization": "Bearer sk-x"}, f"x=1;access_token=+{ADMIN}+"),
    ],
    ids=[
        "bearer",
        "bearer-tab",
        "bare",
        "x-api-key",
        "in-a-list",
        "cookie",
        "basic",
        "query",
        "query-escaped",
        "query-after-semicolon",
    ],
)
@pytest.mark.parametrize("path", ["chat/completions", "messages", "files"])
def test_a_credential_that_is_the_token_is_refused(
    upstream: FakeUpstream, proxy: ProxyServer, headers: dict[str, str], query: str, path: str
) -> None:
    upstream.reset()
    body = {"model": "m", "max_tokens": 5, "messages": MESSAGES}
    url = f"{proxy.url}/{path}" + (f"?{query}" if query else "")
    if path == "files":
        r = httpx.get(url, headers=headers)
    else:
        r = httpx.post(url, headers=headers, json=body)
    if query and path != "files":  # a door's query never goes upstream
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 403, r.text
    if path == "messages":
        assert r.json()["error"]["type"] == "permission_error"
    else:
        assert r.json()["error"]["code"] == "admin_token_not_forwarded"
    assert upstream.requests == []
