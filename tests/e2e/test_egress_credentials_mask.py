"""A route's egress proxy credentials (`upstream_proxy:
http://user:password@host:port`) travel to that proxy with every request to
an http upstream; a proxy that quotes them back (an error page, a 407 that
repeats the request) hands them to no client."""

from __future__ import annotations

import base64
import json

import httpx

from tests.harness import FakeUpstream, Json, running_proxy

TOKEN = base64.b64encode(b"egress-user:egress-pass-0123456789").decode()


def test_an_egress_proxys_credentials_quoted_back_reach_no_client(
    upstream: FakeUpstream,
) -> None:
    """Regression: only route keys and credential headers were masked, so the
    `Proxy-Authorization` the proxy itself made from `upstream_proxy`
    reached every client whose request the egress proxy refused quoting it."""
    # the fake upstream stands in for the egress proxy: the upstream's name is
    # not loopback, so its requests go through the proxy, in absolute form
    via = upstream.url.split("//", 1)[1].split("/", 1)[0]
    config = {
        "routes": [
            {
                "name": "egress",
                "models": ["*"],
                "upstream": "http://api.egress-only.test/v1",
                "upstream_proxy": f"http://egress-user:egress-pass-0123456789@{via}",
            }
        ]
    }
    refusal = Json(
        {"error": {"message": f"proxy refused Proxy-Authorization: Basic {TOKEN}"}},
        status=407,
        headers={"x-proxy-echo": f"Basic {TOKEN}"},
    )
    with running_proxy(config) as proxy:
        upstream.script(refusal, refusal, refusal)
        with httpx.Client(base_url=proxy.base, timeout=30) as client:
            seen = [
                client.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                ),
                client.post("/v1/responses", json={"model": "m", "input": "hi"}),
                client.get("/v1/models"),
            ]
    assert [r.headers["proxy-authorization"] for r in upstream.requests] == [f"Basic {TOKEN}"] * 3
    assert [r.status_code for r in seen] == [407, 407, 407]
    texts = [r.text + json.dumps(dict(r.headers)) for r in seen]
    assert not [t for t in texts if TOKEN in t], texts
    assert all("[REDACTED]" in t for t in texts), texts
