"""Behind a route key, the upstream account's videos, ChatKit threads and
Conversations are stored objects that no client owns: every client of the
route would list, read, continue or delete what another made, so they are
refused like files and batches unless the route sets `shared_objects`."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

BOB = {"Authorization": "Bearer sk-bob-shared-objects"}
ROUTE_KEY = "sk-route-shared-objects-0123456789"
LISTED = {"object": "list", "data": [{"id": "video_alice", "object": "video"}]}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/videos"),
        ("GET", "/videos/video_alice/content"),
        ("DELETE", "/videos/video_alice"),
        ("GET", "/chatkit/threads"),
        ("DELETE", "/chatkit/threads/cthr_alice"),
        ("GET", "/Conversations/conv_alice/items"),
        ("POST", "/CONVERSATIONS/conv_alice/items"),
    ],
)
def test_the_accounts_videos_and_conversations_are_not_shared_behind_a_route_key(
    upstream: FakeUpstream, method: str, path: str
) -> None:
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(Json(LISTED))
        answer = httpx.request(method, proxy.url + path, headers=BOB)
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "shared_objects_refused"
    assert upstream.requests == []


def test_shared_objects_lets_them_through(upstream: FakeUpstream) -> None:
    config = route_config(upstream, api_key=ROUTE_KEY, shared_objects=True)
    with running_proxy(config) as proxy:
        upstream.script(Json(LISTED))
        answer = httpx.get(f"{proxy.url}/videos", headers=BOB)
    assert answer.status_code == 200, answer.text
    assert upstream.requests[-1].path == "/v1/videos"
