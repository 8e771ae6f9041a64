"""A pass-through dot segment that an escaped `?` or `#` ends.

A server that decodes a path and then reads it as a URL (the double decoding
the proxy already guards against for `..%2F`) ends a segment at a decoded
`?` or `#`: `/tenant-x/v1/..%3F/admin` reads as `/tenant-x/v1/..` with the
query `/admin`, one level above the route's base path. Such a path is a 400
`invalid_path`, with nothing sent upstream; an escaped `?` elsewhere in a
path still goes as written."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_reliability import raw_request, tenant_route
from tests.harness import FakeUpstream, running_proxy


@pytest.mark.parametrize(
    "target",
    [
        "/v1/..%3F/admin",
        "/v1/%2e%2e%3f/admin",
        "/v1/models/..%23/admin",
        "/v1/.%3Fx",
        "/v1/..%253F/admin",  # escaped twice
    ],
)
def test_a_dot_segment_ended_by_an_escaped_query_or_fragment_is_refused(
    upstream: FakeUpstream, target: str
) -> None:
    with running_proxy(tenant_route(upstream)) as proxy:
        status, body = raw_request(proxy.port, target, "Authorization: Bearer sk-client-key\r\n")
    assert status == 400
    assert json.loads(body)["error"]["code"] == "invalid_path"
    assert upstream.requests == []


def test_an_escaped_query_mark_elsewhere_in_a_path_goes_as_written(
    upstream: FakeUpstream,
) -> None:
    with running_proxy(tenant_route(upstream)) as proxy:
        status, _ = raw_request(proxy.port, "/v1/models/a..%3Fb")
    assert status == 200
    (sent,) = upstream.requests
    assert sent.path == "/tenant-x/v1/models/a..?b"  # aiohttp decodes the escape
