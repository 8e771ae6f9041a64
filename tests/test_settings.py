"""Request headers that carry settings: the conversation id header."""

from __future__ import annotations

import pytest

from proxy.errors import InvalidConversationId
from proxy.settings import request_conversation_id


def test_conversation_id_from_the_headers() -> None:
    assert request_conversation_id([]) is None
    assert request_conversation_id([("x-other", "a"), ("x-conversation-id", "c-1")]) == "c-1"


def test_the_same_conversation_id_twice_is_one_id() -> None:
    headers = [("x-conversation-id", "c-1"), ("accept", "*/*"), ("x-conversation-id", "c-1")]
    assert request_conversation_id(headers) == "c-1"


@pytest.mark.parametrize(
    "headers",
    [
        [("x-conversation-id", "c-1"), ("x-conversation-id", "c-2")],
        [("x-conversation-id", "c-1"), ("x-conversation-id", "c-1"), ("x-conversation-id", "C-1")],
        [("x-conversation-id", "c-1"), ("x-conversation-id", "bad value")],
    ],
)
def test_two_different_conversation_ids_are_refused(headers: list[tuple[str, str]]) -> None:
    with pytest.raises(InvalidConversationId) as info:
        request_conversation_id(headers)
    error = info.value
    assert error.param == "X-Conversation-Id"
    assert error.code == "invalid_conversation_id"
    assert "given twice with different values" in error.message
    for _, value in headers:
        assert value not in error.message.replace("X-Conversation-Id", "")


def test_a_malformed_conversation_id_is_refused_without_its_value() -> None:
    with pytest.raises(InvalidConversationId) as info:
        request_conversation_id([("x-conversation-id", "semi;colon")])
    assert "semi;colon" not in info.value.message


def test_a_profile_named_twice_differently_is_refused() -> None:
    from proxy.errors import InvalidSetting
    from proxy.settings import request_profile

    assert request_profile([("x-reasoning-profile", "fast")] * 2) == "fast"
    assert request_profile([]) is None
    with pytest.raises(InvalidSetting) as caught:
        request_profile([("x-reasoning-profile", "fast"), ("x-reasoning-profile", "deep")])
    assert caught.value.param == "X-Reasoning-Profile"
    assert "fast" not in caught.value.message
    assert "deep" not in caught.value.message
