"""Listing a stored response's input items (`proxy.doors.responses.items`):
what the chain gives, the ids, and pages that add up to the whole list."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.doors.responses.items import chain_items, page, page_params, prior_items
from proxy.errors import BadRequest

FIRST = {
    "response": {
        "id": "resp_1",
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "rp1.x"},
            {"id": "msg_1", "type": "message", "role": "assistant", "content": []},
        ],
    },
    "input": [{"type": "message", "role": "user", "content": "Weather in Paris?"}],
}
SECOND = {
    "response": {"id": "resp_2", "output": [{"id": "msg_2", "type": "message"}]},
    "input": [
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        {"id": "own_id", "type": "message", "role": "user", "content": [{"type": "input_text"}]},
    ],
    "previous_response_id": "resp_1",
}


def test_the_chain_gives_earlier_inputs_and_outputs_then_its_own_input() -> None:
    items = chain_items([SECOND, FIRST])  # newest first, as loaded
    ids = [i["id"] for i in items]
    assert ids[1:3] == ["rs_1", "msg_1"]  # the earlier response's output
    assert ids[4] == "own_id"  # a client's own id is kept
    assert "msg_2" not in ids  # its own output is no input
    assert ids[0].startswith("msg_")
    assert ids[3].startswith("fco_")
    assert items[0]["content"] == [{"type": "input_text", "text": "Weather in Paris?"}]
    assert items[0]["status"] == "completed"
    # made ids are the same on every call, and differ between items
    assert [i["id"] for i in chain_items([SECOND, FIRST])] == ids
    assert len(set(ids)) == len(ids)
    # a string from the assistant is output text
    (said,) = chain_items(
        [{"response": {"id": "r"}, "input": [{"role": "assistant", "content": "ok"}]}]
    )
    assert said["content"] == [{"type": "output_text", "text": "ok", "annotations": []}]


def test_the_prior_history_is_every_links_input_and_output_oldest_first() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    first = {**FIRST, "response": {"id": "resp_1", "output": [call]}}
    items = prior_items([SECOND, first])
    assert [i.get("type") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]


def test_a_chain_cut_before_a_call_leaves_its_output_out() -> None:
    """The first link (with the call c1) is gone: its output answers no call."""
    items = prior_items([SECOND])
    assert [i.get("type") for i in items] == ["message", "message"]


def test_a_page_is_newest_first_and_shows_envelopes_only_when_asked() -> None:
    items = chain_items([SECOND, FIRST])
    newest = page(items)
    assert [i["id"] for i in newest["data"]] == [i["id"] for i in reversed(items)]
    assert (newest["first_id"], newest["last_id"], newest["has_more"]) == (
        items[-1]["id"],
        items[0]["id"],
        False,
    )
    reasoning = next(i for i in newest["data"] if i["type"] == "reasoning")
    assert "encrypted_content" not in reasoning
    shown = page(items, encrypted=True)["data"]
    assert next(i for i in shown if i["type"] == "reasoning")["encrypted_content"] == "rp1.x"
    assert page([]) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


@given(
    n=st.integers(0, 30),
    limit=st.integers(1, 7),
    order=st.sampled_from(["asc", "desc"]),
)
def test_pages_after_each_last_id_add_up_to_the_whole_list(n: int, limit: int, order: str) -> None:
    items = [{"id": f"i{k}", "type": "message"} for k in range(n)]
    whole = items if order == "asc" else items[::-1]
    seen: list[Any] = []
    after = None
    while True:
        got = page(items, order=order, limit=limit, after=after)
        seen += got["data"]
        assert len(got["data"]) <= limit
        if not got["has_more"]:
            break
        after = got["last_id"]
    assert seen == whole
    if n > 2:  # before: the items ahead of one, in the same order
        middle = whole[n // 2]["id"]
        assert page(items, order=order, limit=100, before=middle)["data"] == whole[: n // 2]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"order": "newest"}, "order"),
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
    ],
)
def test_bad_page_parameters_name_themselves(params: dict[str, str], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        page_params(params)
    assert info.value.param == param


def test_page_parameters_default_to_twenty_newest_first() -> None:
    assert page_params({}) == ("desc", 20, None, None)
    assert page_params({"order": "asc", "limit": "100", "after": "x"}) == ("asc", 100, "x", None)
    with pytest.raises(BadRequest) as info:
        page([{"id": "a"}], after="gone")
    assert info.value.param == "after"
