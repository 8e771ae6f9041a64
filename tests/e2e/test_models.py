"""GET /v1/models end to end, for both SDKs: the `anthropic` SDK (which sends
`anthropic-version`) gets Anthropic's list and ModelInfo objects, paged and
retrieved by id, with Anthropic's errors; the `openai` SDK gets the
upstream's answer unchanged. The list is the default route's upstream's,
under the same credentials and auth rules as the pass-through."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import ModelInfo

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.messages_wire import sdk_client

KEY = "sk-ant-models"
IDS = ["m-newest", "accounts/acme/models/m-2", "m-3", "m-4", "m-oldest"]
LISTING: dict[str, Any] = {
    "object": "list",
    "data": [
        {"id": IDS[0], "object": "model", "created": 1767225600, "owned_by": "acme"},
        {"id": IDS[1], "object": "model", "created": 1735689600, "owned_by": "acme"},
        {"id": IDS[2], "name": "Acme: Model Three", "created": 1704067200},
        {"id": IDS[3], "object": "model", "owned_by": "acme"},  # no creation time
        {"id": IDS[4], "object": "model", "created": 0, "owned_by": "acme"},
    ],
}


def lists(upstream: FakeUpstream, times: int = 1) -> None:
    upstream.script(*[Json(LISTING) for _ in range(times)])


def anthropic_page(proxy_base: str, **query: Any) -> httpx.Response:
    return httpx.get(
        f"{proxy_base}/v1/models",
        params=query,
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )


def test_the_anthropic_sdk_lists_models_in_its_shape(upstream: FakeUpstream) -> None:
    lists(upstream, 2)
    with running_proxy(route_config(upstream)) as proxy:
        page = sdk_client(proxy.base, KEY).models.list()
        raw = anthropic_page(proxy.base)
    assert [m.id for m in page.data] == IDS
    assert (page.has_more, page.first_id, page.last_id) == (False, IDS[0], IDS[-1])
    first = page.data[0]
    assert isinstance(first, ModelInfo)
    assert first.type == "model"
    assert first.display_name == IDS[0]
    assert first.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert page.data[2].display_name == "Acme: Model Three"  # the upstream's own name
    assert page.data[3].created_at == datetime(1970, 1, 1, tzinfo=UTC)  # unknown: the epoch
    # every item is a whole ModelInfo to the SDK's own (strict) model
    body = raw.json()
    assert set(body) == {"data", "has_more", "first_id", "last_id"}
    for item in body["data"]:
        ModelInfo.model_validate(item, strict=False)
    assert body["data"][0] == {
        "type": "model",
        "id": IDS[0],
        "display_name": IDS[0],
        "created_at": "2026-01-01T00:00:00Z",
        "lifecycle": "active",
    }
    # what the upstream was asked: its own list, with the client's key as a
    # bearer token and no anthropic-* header
    sent = upstream.requests[0]
    assert (sent.method, sent.path, sent.query) == ("GET", "/v1/models", "")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in sent.headers
    assert not any(k.lower().startswith("anthropic-") for k in sent.headers)


def test_pages_walk_forwards_with_after_id_and_backwards_with_before_id(
    upstream: FakeUpstream,
) -> None:
    lists(upstream, 8)
    with running_proxy(route_config(upstream)) as proxy:
        models = sdk_client(proxy.base, KEY).models
        first = models.list(limit=2)
        walked = [m.id for m in models.list(limit=2)]  # the SDK follows after_id: 3 pages
        middle = models.list(limit=2, after_id=IDS[1])
        before = models.list(limit=2, before_id=IDS[4])
        backwards = [m.id for m in models.list(limit=3, before_id=IDS[4])]  # 2 pages
    assert [m.id for m in first.data] == IDS[:2]
    assert (first.has_more, first.first_id, first.last_id) == (True, IDS[0], IDS[1])
    assert walked == IDS
    assert [m.id for m in middle.data] == IDS[2:4]
    assert middle.has_more is True
    assert [m.id for m in before.data] == IDS[2:4]
    assert (before.has_more, before.first_id) == (True, IDS[2])
    assert backwards == IDS[1:4] + IDS[:1]
    assert len(upstream.requests) == 8  # one upstream list per page


def test_a_model_is_retrieved_by_id_and_an_unknown_one_is_anthropics_404(
    upstream: FakeUpstream,
) -> None:
    lists(upstream, 3)
    with running_proxy(route_config(upstream)) as proxy:
        models = sdk_client(proxy.base, KEY).models
        three = models.retrieve(IDS[2])
        slashed = models.retrieve(IDS[1])  # sent as accounts%2Facme%2Fmodels%2Fm-2
        with pytest.raises(anthropic.NotFoundError) as caught:
            models.retrieve("claude-none")
    assert isinstance(three, ModelInfo)
    assert (three.id, three.display_name) == (IDS[2], "Acme: Model Three")
    assert slashed.id == IDS[1]
    assert caught.value.status_code == 404
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "No model with that id."},
    }
    # the model is looked up in the list: the upstream is asked for /models only
    assert [r.path for r in upstream.requests] == ["/v1/models"] * 3


def test_bad_paging_is_anthropics_400_and_nothing_goes_upstream(upstream: FakeUpstream) -> None:
    lists(upstream)
    with running_proxy(route_config(upstream)) as proxy:
        models = sdk_client(proxy.base, KEY).models
        refused = []
        for query in ({"limit": 0}, {"limit": 1001}, {"after_id": "a", "before_id": "b"}):
            with pytest.raises(anthropic.BadRequestError) as caught:
                models.list(**query)
            refused.append(caught.value.body["error"]["type"])
        sent = len(upstream.requests)
        with pytest.raises(anthropic.BadRequestError) as unknown:
            models.list(after_id="no-such-model")
    assert refused == ["invalid_request_error"] * 3
    assert sent == 0
    assert unknown.value.body["error"]["message"] == "after_id names no model in the list."


def test_upstream_errors_keep_their_status_in_anthropics_shape(upstream: FakeUpstream) -> None:
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    moved = Json({}, status=302, headers={"Location": "http://127.0.0.1:9/models"})
    upstream.script(Json(error, status=401), Json({"object": "list"}), moved)
    with running_proxy(route_config(upstream)) as proxy:
        models = sdk_client(proxy.base, KEY).models
        with pytest.raises(anthropic.AuthenticationError) as refused:
            models.list()
        with pytest.raises(anthropic.InternalServerError) as malformed:
            models.list()
        with pytest.raises(anthropic.InternalServerError) as redirected:
            models.list()  # a redirect is not followed
    assert redirected.value.status_code == 502
    assert len(upstream.requests) == 3
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Incorrect API key provided"},
    }
    assert malformed.value.status_code == 502
    assert malformed.value.body["error"]["type"] == "api_error"


def test_the_same_auth_and_key_rules_as_the_pass_through(upstream: FakeUpstream) -> None:
    """With `server.require_auth`, no key is Anthropic's 401 and nothing goes
    upstream; a route key replaces the client's key upstream."""
    auth = {"server": {"require_auth": True}}
    config = route_config(upstream, api_key="rk-route-models", top=auth)
    lists(upstream)
    with running_proxy(config) as proxy:
        keyless = httpx.get(f"{proxy.url}/models", headers={"anthropic-version": "2023-06-01"})
        sent = len(upstream.requests)
        listed = sdk_client(proxy.base, KEY).models.list()
    assert keyless.status_code == 401
    assert keyless.json()["type"] == "error"
    assert keyless.json()["error"]["type"] == "authentication_error"
    assert sent == 0
    assert len(listed.data) == len(IDS)
    assert upstream.requests[0].headers.getall("authorization") == ["Bearer rk-route-models"]


def test_a_get_with_a_body_sends_none_of_it_upstream(upstream: FakeUpstream) -> None:
    """The upstream's list is asked for without the client's body, so
    without its Content-Length too (a length with no body would leave the
    upstream waiting for it)."""
    lists(upstream)
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.request(
            "GET",
            f"{proxy.url}/models",
            content=b'{"model": "m"}',
            headers={"anthropic-version": "2023-06-01", "content-type": "application/json"},
            timeout=10,
        )
    assert r.status_code == 200
    sent = upstream.requests[0]
    assert sent.body == b""
    assert sent.headers.get("content-length", "0") == "0"
    assert "content-type" not in sent.headers


def test_the_openai_sdk_still_gets_the_upstreams_answer_unchanged(upstream: FakeUpstream) -> None:
    one = {"id": IDS[0], "object": "model", "created": 1767225600, "owned_by": "acme"}
    upstream.script(Json(LISTING), Json(one))
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        raw = client.models.with_raw_response.list()
        got = client.models.retrieve(IDS[0])
        client.close()
    assert raw.http_request.headers.get("anthropic-version") is None
    assert raw.http_response.json() == LISTING
    assert [m.id for m in raw.parse().data] == IDS
    assert got.model_dump(exclude_none=True) == one
    assert [r.path for r in upstream.requests] == ["/v1/models", f"/v1/models/{IDS[0]}"]


def test_a_messages_upstream_answers_anthropics_shape_itself(upstream: FakeUpstream) -> None:
    """Behind a default route of `api: messages` the request passes through
    as before, its paging included: the upstream speaks Anthropic's API."""
    own = {
        "data": [
            {
                "type": "model",
                "id": "claude-x",
                "display_name": "Claude X",
                "created_at": "2026-02-04T00:00:00Z",
                "lifecycle": "active",
            }
        ],
        "has_more": True,
        "first_id": "claude-x",
        "last_id": "claude-x",
    }
    upstream.script(Json(own))
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        page = sdk_client(proxy.base, KEY).models.list(limit=1)
    assert [m.display_name for m in page.data] == ["Claude X"]
    assert page.has_more is True
    sent = upstream.requests[0]
    assert (sent.path, sent.query) == ("/v1/models", "limit=1")
    assert "anthropic-version" in sent.headers  # the SDK's own, passed on


def test_a_messages_route_key_goes_as_x_api_key_on_the_pass_through(
    upstream: FakeUpstream,
) -> None:
    """Anthropic's API takes a key as `x-api-key`: a Messages route's own
    key goes that way on the pass-through too, alone."""
    upstream.script(Json({"data": [], "has_more": False, "first_id": None, "last_id": None}))
    with running_proxy(route_config(upstream, api="messages", api_key="sk-ant-route")) as proxy:
        page = sdk_client(proxy.base, KEY).models.list()
    assert page.data == []
    sent = upstream.requests[0]
    assert sent.headers.getall("x-api-key") == ["sk-ant-route"]
    assert "authorization" not in sent.headers


def test_errors_the_proxy_answers_itself_are_anthropics_for_anthropic_clients(
    upstream: FakeUpstream,
) -> None:
    """A refusal before any door (here a page of another origin) comes in
    Anthropic's shape to a client that sends `anthropic-version`, in
    OpenAI's to others."""
    with running_proxy(route_config(upstream)) as proxy:
        foreign = {"Origin": "https://evil.example", "x-api-key": KEY}
        anthropic_client = httpx.get(
            f"{proxy.base}/v1/models", headers={**foreign, "anthropic-version": "2023-06-01"}
        )
        openai_client = httpx.get(f"{proxy.base}/v1/models", headers=foreign)
    assert anthropic_client.status_code == openai_client.status_code == 403
    assert anthropic_client.json()["type"] == "error"
    assert anthropic_client.json()["error"]["type"] == "permission_error"
    assert openai_client.json()["error"]["code"] == "forbidden_origin"
    assert upstream.requests == []
