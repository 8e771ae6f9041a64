"""The dialect table as data: detection by host and model name, the effort
mapping, and the table's own consistency."""

from __future__ import annotations

import pytest

from proxy.dialects import (
    DEFAULT_DIALECT,
    DIALECTS,
    EFFORTS,
    HOSTS,
    MAKERS,
    apply_params,
    dialect_for,
    host_dialect,
    maker_dialect,
    nearest_effort,
    plan_params,
)
from proxy.settings import ReasoningSettings


@pytest.mark.parametrize(
    ("value", "choices", "expected"),
    [
        ("low", (), "low"),  # no list: as given
        ("xhigh", ("low", "medium", "high"), "high"),
        ("minimal", ("low", "medium", "high"), "low"),
        ("none", ("low", "medium", "high"), "low"),
        ("medium", ("low", "high"), "high"),  # a tie goes up
        ("minimal", ("none", "low", "medium", "high"), "low"),
        ("medium", ("high", "xhigh"), "high"),
        ("high", ("high",), "high"),
    ],
)
def test_nearest_effort(value: str, choices: tuple[str, ...], expected: str) -> None:
    assert nearest_effort(value, choices) == expected


@pytest.mark.parametrize(
    ("model", "maker"),
    [
        ("kimi-k2-thinking", "kimi"),
        ("moonshotai/Kimi-K2.6", "kimi"),
        ("demo-kimi", "kimi"),
        ("moonshot-v1-8k", "kimi"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek"),
        ("MiniMaxAI/MiniMax-M2", "minimax"),
        ("zai-org/GLM-4.6", "glm"),
        ("grok-4.3", "xai"),
        ("gpt-5.1", None),
        ("Qwen/Qwen3-8B", None),  # Qwen runs on many servers with different switches
        ("", None),
        (None, None),
    ],
)
def test_maker_from_the_model_name(model: str | None, maker: str | None) -> None:
    found = maker_dialect(model)
    assert (found.name if found else None) == maker


def test_detection_order_route_then_host_then_model() -> None:
    kimi, openai, vllm = DIALECTS["kimi"], DIALECTS["openai"], DIALECTS["vllm"]
    # explicit or host: the model name does not change the wire format
    assert dialect_for(openai, "config", "kimi-k2-thinking") is openai
    assert dialect_for(kimi, "host", "some-model") is kimi
    # neither: the model name, else openai
    assert dialect_for(openai, "model", "kimi-k2-thinking") is kimi
    assert dialect_for(openai, "model", "llama-3") is DIALECTS[DEFAULT_DIALECT]
    assert dialect_for(openai, "model", None) is DIALECTS[DEFAULT_DIALECT]
    # many makers' models: the wire stays, the maker's need to re-inject comes along
    borrowed = dialect_for(vllm, "config", "moonshotai/Kimi-K2-Thinking")
    assert (borrowed.name, borrowed.auto_include, borrowed.native_field) == (
        "vllm",
        True,
        "reasoning",
    )
    assert dialect_for(vllm, "config", "Qwen/Qwen3-8B") is vllm
    # single-maker upstreams do not borrow
    assert dialect_for(DIALECTS["xai"], "host", "kimi-k2") is DIALECTS["xai"]


def test_host_globs() -> None:
    assert host_dialect("API.MOONSHOT.AI.") is DIALECTS["kimi"]
    assert host_dialect("dashscope-us.aliyuncs.com") is DIALECTS["dashscope"]
    assert host_dialect("evil-api.deepseek.com.example") is None
    assert host_dialect("") is None
    assert {name for _, name in HOSTS} <= set(DIALECTS)
    assert {name for _, name in MAKERS} <= set(DIALECTS)


def test_the_table_is_consistent() -> None:
    for dialect in DIALECTS.values():
        families = [dialect.params, *(f.params for f in dialect.families)]
        for rules in families:
            for rule in rules:
                assert set(rule.choices) <= set(EFFORTS), dialect.name
                assert list(rule.choices) == sorted(rule.choices, key=EFFORTS.index)
                if rule.setting == "enabled":
                    assert rule.value != "$value", dialect.name  # an off switch is a fixed value
        hash(dialect)  # per-request detection caches on it


def test_disabled_supersedes_effort_and_budget_and_is_never_silent() -> None:
    settings = ReasoningSettings(enabled=False, effort="high", max_tokens=100)
    for dialect in DIALECTS.values():
        plan = plan_params(dialect, settings, "some-model")
        if plan.params:
            assert plan.ignored == ()
            assert {setting for setting, _, _ in plan.params} == {"enabled"}
        else:
            assert plan.ignored == ("enabled",), dialect.name


@pytest.mark.parametrize(
    ("body", "after"),
    [
        ({"thinking": {"type": "disabled"}}, {"thinking": {"type": "enabled"}}),
        ({}, {}),  # no switch in the body: none is added
        ({"thinking": "disabled"}, {"thinking": "disabled"}),  # not the switch's shape
        ({"thinking": {"budget_tokens": 9}}, {"thinking": {"budget_tokens": 9}}),
    ],
)
def test_a_header_turning_reasoning_on_flips_only_a_switch_the_body_holds(
    body: dict[str, object], after: dict[str, object]
) -> None:
    params = plan_params(DIALECTS["deepseek"], ReasoningSettings(enabled=True)).params
    apply_params(body, params, frozenset({"enabled"}))
    assert body == after
    # the same setting from a route or profile leaves the client's switch alone
    kept = {"thinking": {"type": "disabled"}}
    apply_params(kept, params, frozenset())
    assert kept == {"thinking": {"type": "disabled"}}
