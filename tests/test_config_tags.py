"""Per-route delimiters in the config: `tags` entries (names, open/close
pairs, presets), `tags_only_at_start`, `answer_tags`, `tool_call_markers`;
bad ones are config errors that name the route and the problem."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import build_config, describe
from proxy.errors import ConfigError
from proxy.reasoning.tags import DEFAULT_TAG_SET, DROP, END, OPEN

UP = "http://127.0.0.1:9/v1"


def route(**options: Any) -> dict[str, Any]:
    return {"routes": [{"name": "r", "upstream": UP, **options}]}


def test_the_default_tag_set() -> None:
    config = build_config(route())
    assert config.routes[0].tags == DEFAULT_TAG_SET


def test_names_pairs_presets_and_options() -> None:
    config = build_config(
        route(
            tags=["think", {"open": "[THINK]", "close": "[/THINK]"}, {"preset": "harmony"}],
            tags_only_at_start=True,
            answer_tags=["answer", "response"],
            tool_call_markers=["<tool_call>", "<|tool_calls_section_begin|>"],
        )
    )
    tags = config.routes[0].tags
    kinds = {d: kind for d, kind, _ in tags.table}
    assert kinds["[think]"] == OPEN
    assert kinds["<|channel|>analysis<|message|>"] == OPEN
    assert kinds["</response>"] == DROP
    assert kinds["<|tool_calls_section_begin|>"] == END
    assert tags.only_at_start
    (shown,) = describe(config)["routes"]
    assert shown["tags"] == [
        "think",
        {"open": "[THINK]", "close": "[/THINK]"},
        {"preset": "harmony"},
    ]
    assert shown["tags_only_at_start"] is True
    assert shown["answer_tags"] == ["answer", "response"]
    assert shown["tool_call_markers"] == ["<tool_call>", "<|tool_calls_section_begin|>"]


def test_an_empty_list_turns_parsing_off() -> None:
    tags = build_config(route(tags=[])).routes[0].tags
    assert tags.table == ()
    assert describe(build_config(route(tags=[])))["routes"][0]["tags"] == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"tags": [{"open": "", "close": "[/T]"}]},
            "routes[0].tags: a reasoning open delimiter must not be empty",
        ),
        ({"tags": [{"open": "[T]", "close": " "}]}, "must not be empty"),
        ({"tags": [{"open": "[T]", "close": "[t]"}]}, "open and close must differ"),
        (
            {"tags": [{"preset": "qwen"}]},
            "unknown tag preset 'qwen' (known: harmony, magistral, kimi_vl)",
        ),
        ({"tags": [{"open": "[T]"}]}, "routes[0].tags"),
        ({"tags": [{"open": "[T]", "close": "[/T]", "x": 1}]}, "routes[0].tags"),
        ({"tags": ["think", {"open": "<think>", "close": "[/T]"}]}, "two roles"),
        ({"answer_tags": ["think"]}, "two roles"),
        ({"tool_call_markers": [""]}, "must not be empty"),
        ({"tags": [], "implicit_open_tag": True}, "implicit_open_tag needs a close tag"),
    ],
)
def test_bad_delimiters_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(route(**options))
    assert message in str(info.value)
