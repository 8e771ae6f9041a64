"""The model list in Anthropic's shape (proxy.doors.messages.models), pure:
ModelInfo objects from OpenAI's model objects, the paging parameters, and
pages at every edge."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.doors.messages.models import (
    DEFAULT_LIMIT,
    EPOCH,
    find,
    model_info,
    model_infos,
    page,
    page_params,
    rfc3339,
)
from proxy.errors import BadRequest, NotFound, UpstreamError

IDS = ["a", "b", "c", "d", "e"]
MODELS = [model_info({"id": i}) for i in IDS]


def ids(result: dict[str, Any]) -> list[str]:
    return [m["id"] for m in result["data"]]


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        (1767225600, "2026-01-01T00:00:00Z"),
        (1767225600.9, "2026-01-01T00:00:00Z"),
        (0, EPOCH),
        (None, EPOCH),
        ("1767225600", EPOCH),
        (True, EPOCH),
        (10**20, EPOCH),  # past any calendar
    ],
)
def test_created_becomes_an_rfc3339_time_or_the_epoch(created: Any, expected: str) -> None:
    assert rfc3339(created) == expected


def test_a_model_object_becomes_a_model_info() -> None:
    openai = {"id": "gpt-x", "object": "model", "created": 1735689600, "owned_by": "acme"}
    assert model_info(openai) == {
        "type": "model",
        "id": "gpt-x",
        "display_name": "gpt-x",
        "created_at": "2025-01-01T00:00:00Z",
        "lifecycle": "active",
    }
    assert model_info({"id": "x", "name": "Acme: X"})["display_name"] == "Acme: X"
    assert model_info({"id": "x", "display_name": "X", "name": "Acme: X"})["display_name"] == "X"
    assert model_info({"id": "x", "name": ""})["display_name"] == "x"


@pytest.mark.parametrize(
    "listing",
    [None, [], "models", {"object": "list"}, {"data": {}}, {"data": [{"id": 1}]}, {"data": ["a"]}],
)
def test_a_list_that_is_no_list_of_models_is_an_upstream_error(listing: Any) -> None:
    with pytest.raises(UpstreamError) as caught:
        model_infos(listing)
    assert caught.value.code == "malformed_upstream_response"


def test_the_upstreams_order_is_kept() -> None:
    listing = {"data": [{"id": "z"}, {"id": "a"}, {"id": "m"}]}
    assert [m["id"] for m in model_infos(listing)] == ["z", "a", "m"]
    assert model_infos({"data": []}) == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", (DEFAULT_LIMIT, None, None)),
        ("limit=1", (1, None, None)),
        ("limit=1000&after_id=a", (1000, "a", None)),
        ("before_id=b%2Fc&beta=true", (DEFAULT_LIMIT, None, "b/c")),
        ("limit=3&limit=4", (4, None, None)),  # the last of a repeated name
    ],
)
def test_paging_parameters(query: str, expected: tuple[int, str | None, str | None]) -> None:
    assert page_params(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=1001",
        "limit=",
        "limit=-1",
        "limit=+5",
        "limit=%205",
        "limit=1_0",
        "limit=abc",
        "limit=" + "9" * 5000,  # more digits than int() takes
        "after_id=a&before_id=b",
    ],
)
def test_bad_paging_parameters_are_a_400(query: str) -> None:
    with pytest.raises(BadRequest):
        page_params(query)


def test_pages_from_the_start() -> None:
    assert page(MODELS, 2, None, None) == {
        "data": MODELS[:2],
        "has_more": True,
        "first_id": "a",
        "last_id": "b",
    }
    assert page(MODELS, 5, None, None)["has_more"] is False
    assert page(MODELS, 20, None, None)["has_more"] is False
    assert page([], 20, None, None) == {
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
    }


def test_pages_after_a_model() -> None:
    assert ids(page(MODELS, 2, None, None)) == ["a", "b"]
    assert (ids(after := page(MODELS, 2, "b", None)), after["has_more"]) == (["c", "d"], True)
    assert (ids(last := page(MODELS, 2, "d", None)), last["has_more"]) == (["e"], False)
    assert (ids(end := page(MODELS, 2, "c", None)), end["has_more"]) == (["d", "e"], False)
    assert page(MODELS, 2, "e", None) == {
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
    }


def test_pages_before_a_model() -> None:
    assert (ids(before := page(MODELS, 2, None, "e")), before["has_more"]) == (["c", "d"], True)
    assert (ids(start := page(MODELS, 2, None, "c")), start["has_more"]) == (["a", "b"], False)
    assert (ids(short := page(MODELS, 3, None, "b")), short["has_more"]) == (["a"], False)
    assert ids(page(MODELS, 2, None, "a")) == []


@pytest.mark.parametrize(("after", "before"), [("zz", None), (None, "zz")])
def test_a_cursor_naming_no_model_is_a_400(after: str | None, before: str | None) -> None:
    with pytest.raises(BadRequest) as caught:
        page(MODELS, 2, after, before)
    assert caught.value.param == ("after_id" if after else "before_id")


def test_find() -> None:
    assert find(MODELS, "c") == MODELS[2]
    with pytest.raises(NotFound):
        find(MODELS, "C")
