"""`GET /v1/models/{id}` in Anthropic's shape (the anthropic SDK's
`models.retrieve()`) asks the route that serves that id, as the OpenAI-shaped
one does, through a real server and the anthropic SDK: the id is found in
that route's upstream list, a model no route serves is Anthropic's 404 with
nothing sent, a Messages route's upstream answers in its own shape, and the
list itself still comes from the default route.

Regression: the id was looked up in the default route's list only, so
`retrieve()` of another route's model was a 404 (or the default upstream's
model of the same name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.e2e.test_reliability import CHEAP_KEY, restricted_routes
from tests.harness import FakeUpstream, Json, running_proxy
from tests.messages_wire import sdk_client


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    """`cheap-*` (the default route, with a route key) and `other-*`."""
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    yield cheap, other
    cheap.stop()
    other.stop()


def listing(*ids: str) -> Json:
    data = [{"id": i, "object": "model", "created": 1767225600, "owned_by": "acme"} for i in ids]
    return Json({"object": "list", "data": data})


def test_a_model_is_retrieved_from_the_route_that_serves_it(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    other.script(listing("other-1", "other-2"))
    cheap.script(listing("cheap-1"), listing("cheap-1"))
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        models = sdk_client(proxy.base, "sk-client-key").models
        found = models.retrieve("other-1")
        mine = models.retrieve("cheap-1")
        page = models.list()
    assert (found.id, found.type, found.display_name) == ("other-1", "model", "other-1")
    assert mine.id == "cheap-1"
    assert [m.id for m in page.data] == ["cheap-1"]
    assert [r.path for r in other.requests] == ["/v1/models"]
    assert other.requests[0].headers["Authorization"] == "Bearer sk-client-key"
    assert [r.path for r in cheap.requests] == ["/v1/models", "/v1/models"]
    assert cheap.requests[0].headers["Authorization"] == f"Bearer {CHEAP_KEY}"


def test_a_model_no_route_serves_is_anthropics_404_and_nothing_is_sent(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        models = sdk_client(proxy.base, "sk-client-key").models
        with pytest.raises(anthropic.NotFoundError) as missing:
            models.retrieve("expensive-o1-pro")
    body: Any = missing.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert cheap.requests == []
    assert other.requests == []


def test_a_messages_route_answers_for_its_model_itself(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, claude = upstreams
    own = {
        "type": "model",
        "id": "claude-x",
        "display_name": "Claude X",
        "created_at": "2026-02-04T00:00:00Z",
    }
    claude.script(Json(own))
    config = {
        "routes": [
            {"name": "cheap", "models": ["cheap-*"], "upstream": cheap.url},
            {"name": "claude", "models": ["claude-*"], "upstream": claude.url, "api": "messages"},
        ]
    }
    with running_proxy(config) as proxy:
        found = sdk_client(proxy.base, "sk-client-key").models.retrieve("claude-x")
    assert (found.id, found.display_name) == ("claude-x", "Claude X")
    assert [r.path for r in claude.requests] == ["/v1/models/claude-x"]
    assert "anthropic-version" in claude.requests[0].headers
    assert cheap.requests == []
