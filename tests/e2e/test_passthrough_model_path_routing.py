"""`/v1/models/{id}` on the pass-through goes to the route that serves that
model, through a real server and the openai SDK: `models.retrieve()` and
`models.delete()` reach that route's upstream, a model no route serves is
the same 404 as for a body naming it (nothing sent), and the list itself
still comes from the default route.

Regression: the path's model was not read, so every `/v1/models/{id}` went
to the default route: `retrieve()` of another route's model was that
upstream's 404 (or another upstream's model of the same name), and a
`DELETE` of a fine-tuned model reached the default route's account."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.e2e.test_reliability import CHEAP_KEY, restricted_routes
from tests.harness import FakeUpstream, Json, running_proxy


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    """`cheap-*` (the default route, with a route key) and `other-*`."""
    cheap, other = FakeUpstream().start(), FakeUpstream().start()
    yield cheap, other
    cheap.stop()
    other.stop()


def model(name: str) -> Json:
    return Json({"id": name, "object": "model", "created": 1, "owned_by": "acme"})


def test_a_model_is_retrieved_and_deleted_through_its_route(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    other.script(model("other-1"), Json({"id": "other-ft:acme:1", "deleted": True}))
    cheap.script(model("cheap-1"), Json({"object": "list", "data": []}))
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-client-key", max_retries=0)
        with client:
            assert client.models.retrieve("other-1").id == "other-1"
            assert client.models.delete("other-ft:acme:1").deleted
            assert client.models.retrieve("cheap-1").id == "cheap-1"
            assert list(client.models.list()) == []
    assert [(r.method, r.path) for r in other.requests] == [
        ("GET", "/v1/models/other-1"),
        ("DELETE", "/v1/models/other-ft:acme:1"),
    ]
    assert other.requests[0].headers["Authorization"] == "Bearer sk-client-key"
    assert [r.path for r in cheap.requests] == ["/v1/models/cheap-1", "/v1/models"]
    assert cheap.requests[0].headers["Authorization"] == f"Bearer {CHEAP_KEY}"


def test_a_model_no_route_serves_is_404_and_not_sent(
    upstreams: tuple[FakeUpstream, FakeUpstream],
) -> None:
    cheap, other = upstreams
    with running_proxy(restricted_routes(cheap, other)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-client-key", max_retries=0)
        with client, pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("expensive-o1-pro")
    assert missing.value.code == "model_not_found"
    assert cheap.requests == []
    assert other.requests == []
