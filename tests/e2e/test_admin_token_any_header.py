"""The admin token goes upstream in no header and no query parameter, as an
upstream may read either for a credential, through a real server: a header
of any name (`X-Auth-Token`, `Ocp-Apim-Subscription-Key`), an auth-param or
a quoted credential (`Token token="<token>"`, `Bearer "<token>"`), a cookie
or query value percent-encoded (once or twice), the `x-api-key` a Messages
upstream gets beside the client's `Authorization`, and what stays of the
query and headers on a route with its own key. Each is a 403
`admin_token_not_forwarded` with nothing sent; the route's key still
replaces an `Authorization` that is the token (it does not go).

Regression: only six credential header names were looked at, each as a
bare value, `Bearer <value>`, a list item or a Basic pair; a route with its
own key looked at none, nor at its query; and the Messages door checked the
headers it planned with, not the ones it sent (`x-api-key` dropped there
beside an `Authorization`, then forwarded)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy

ADMIN = "admin-9f3c2e71"
ESCAPED = "".join(f"%{b:02X}" for b in ADMIN.encode())
BODY = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["open", "keyed"])
def proxy(upstream: FakeUpstream, request: pytest.FixtureRequest) -> Iterator[ProxyServer]:
    key = {"api_key": "sk-route"} if request.param == "keyed" else {}
    top = {"server": {"admin_token": ADMIN}}
    with running_proxy(route_config(upstream, top=top, **key)) as server:
        yield server


@pytest.fixture(scope="module")
def messages_proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    top = {"server": {"admin_token": ADMIN}}
    with running_proxy(route_config(upstream, api="messages", top=top)) as server:
        yield server


def refused(response: httpx.Response, upstream: FakeUpstream) -> None:
    assert response.status_code == 403, response.text
    assert upstream.requests == []


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Auth-Token": ADMIN},
        {"Ocp-Apim-Subscription-Key": ADMIN},
        {"X-Custom-Key": f"Bearer {ADMIN}"},
        {"X-Auth": f'Token token="{ADMIN}"'},
        {"X-Auth": f"Bearer '{ADMIN}'"},
        {"X-Session": f"sid={ESCAPED}"},
    ],
    ids=["x-auth-token", "apim", "bearer-other-name", "auth-param", "quoted", "escaped"],
)
@pytest.mark.parametrize("path", ["chat/completions", "embeddings"])
def test_a_header_of_any_name_that_carries_the_token_is_refused(
    upstream: FakeUpstream, proxy: ProxyServer, headers: dict[str, str], path: str
) -> None:
    upstream.reset()
    refused(httpx.post(f"{proxy.url}/{path}", headers=headers, json=BODY), upstream)


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f'Token token="{ADMIN}"'},
        {"Authorization": f'Bearer "{ADMIN}"'},
        {"Authorization": f'Digest username="u", response="{ADMIN}"'},
        {"Cookie": f"a=b; session={ESCAPED}"},
    ],
    ids=["auth-param", "quoted", "digest", "cookie-escaped"],
)
@pytest.mark.parametrize("path", ["chat/completions", "embeddings"])
def test_a_credential_header_spelled_otherwise_is_refused(
    upstream: FakeUpstream, proxy: ProxyServer, headers: dict[str, str], path: str
) -> None:
    upstream.reset()
    r = httpx.post(f"{proxy.url}/{path}", headers=headers, json=BODY)
    if proxy.config.routes[0].keyed:  # the client's credential headers never go
        assert r.status_code == 200, r.text
        assert ADMIN not in str(upstream.requests[0].headers.items())
        return
    refused(r, upstream)


@pytest.mark.parametrize(
    "query", [f"token={ADMIN}", f"auth=x,{ADMIN}", "sig=" + ESCAPED.replace("%", "%25")]
)
def test_a_query_parameter_that_carries_the_token_is_refused(
    upstream: FakeUpstream, proxy: ProxyServer, query: str
) -> None:
    upstream.reset()
    r = httpx.post(f"{proxy.url}/embeddings?{query}", json={"model": "m", "input": "x"})
    refused(r, upstream)


def test_the_route_key_replaces_an_authorization_that_is_the_token(
    upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    upstream.reset()
    r = httpx.post(
        f"{proxy.url}/chat/completions", headers={"Authorization": f"Bearer {ADMIN}"}, json=BODY
    )
    if not proxy.config.routes[0].keyed:
        refused(r, upstream)
        return
    assert r.status_code == 200, r.text
    assert upstream.requests[0].headers["authorization"] == "Bearer sk-route"


@pytest.mark.parametrize("path", ["messages", "messages/count_tokens"])
def test_the_messages_door_checks_the_headers_it_sends(
    upstream: FakeUpstream, messages_proxy: ProxyServer, path: str
) -> None:
    upstream.reset()
    headers = {"Authorization": "Bearer sk-client", "x-api-key": ADMIN}
    r = httpx.post(f"{messages_proxy.url}/{path}", headers=headers, json=BODY)
    refused(r, upstream)
    assert r.json()["error"]["type"] == "permission_error"


def test_a_key_beside_the_token_still_goes(
    upstream: FakeUpstream, messages_proxy: ProxyServer
) -> None:
    upstream.reset()
    headers = {"Authorization": "Bearer sk-client", "x-api-key": f"sk-{ADMIN}-2"}
    r = httpx.post(f"{messages_proxy.url}/messages", headers=headers, json=BODY)
    assert r.status_code == 200, r.text
    assert upstream.requests[0].headers["x-api-key"] == f"sk-{ADMIN}-2"
