"""Request headers that carry settings (the conversation id header), and
settings in a config mapping (null where a setting has no unset state)."""

from __future__ import annotations

import pytest

from proxy.errors import InvalidConversationId
from proxy.settings import InvalidSettingValue, config_overrides, request_conversation_id


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


# -- null in a config file or a profile -------------------------------------------
# (`output: null` once silently chose the
# reasoning_details shape, `strip_from_context: null` acted as allButLast)

NO_UNSET_STATE = [
    ("enabled", "true, false"),
    ("include_in_context", "auto, true, false"),
    ("includeInResponse", "true, false"),
    ("format", "field, native"),
    ("strip_from_context", "all, allButLast, none"),
    ("stripFromContext", "all, allButLast, none"),
    ("output", "reasoning_content, reasoning, think_tags, reasoning_details, none"),
]


@pytest.mark.parametrize(("key", "allowed"), NO_UNSET_STATE)
def test_null_is_refused_for_a_setting_without_an_unset_state(key: str, allowed: str) -> None:
    with pytest.raises(InvalidSettingValue) as caught:
        config_overrides({key: None}, "profiles.p")
    assert str(caught.value) == (
        f"profiles.p.{key} cannot be null (leave it out to not set it); "
        f"it must be one of: {allowed}"
    )
    assert caught.value.param == key


def test_null_unsets_effort_and_max_tokens() -> None:
    # the contract's "unset" default: a profile may take a route's effort away
    assert config_overrides({"effort": None, "maxTokens": None}, "p") == {
        "effort": None,
        "max_tokens": None,
    }


def test_a_bad_value_names_its_key_as_written() -> None:
    with pytest.raises(InvalidSettingValue) as caught:
        config_overrides({"stripFromContext": "some"}, "settings")
    assert caught.value.param == "stripFromContext"
