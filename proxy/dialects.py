"""Upstream dialects: how each kind of upstream wants reasoning, as data.

A dialect says how reasoning goes back upstream with `format: native`
(`native_field`), whether assistant tool-call turns need the reasoning key
even when empty (`tool_turn_placeholder`), whether reasoning may be sent at
all (`never_send`), and how the request-side settings map to body parameters
(`params`). Nothing here branches on a dialect's name.

Provider formats, as their documentation describes them:
- openai: `reasoning_effort` on Chat Completions
  (https://platform.openai.com/docs/api-reference/chat/create).
- deepseek: `reasoning_content` in responses; thinking mode toggled with
  `thinking: {"type": "enabled"}` and `reasoning_effort`; on turns with tool
  calls `reasoning_content` "must be passed back to the API", `""` accepted
  (https://api-docs.deepseek.com/guides/thinking_mode#tool-calls). The old
  R1 API rejected it in input, which the default include=false respects
  (https://api-docs.deepseek.com/guides/reasoning_model).
- kimi: `reasoning_content` must stay on assistant tool-call messages, else
  400 "thinking is enabled but reasoning_content is missing in assistant tool
  call message at index N"; K2.5/K2.6 treat `""` as missing and accept one
  space (https://platform.moonshot.ai/docs/guide/use-kimi-k2-thinking-model).
  Sending `thinking` and `reasoning_effort` together is rejected, so the
  dialect adds no request parameters.
- openrouter: request `reasoning: {effort | max_tokens}`; pass
  `reasoning_details` back unmodified and in order, or `reasoning` as a
  string (https://openrouter.ai/docs/use-cases/reasoning-tokens).
- vllm: `reasoning` field (renamed from `reasoning_content`; recent builds
  read only `reasoning` on input); `chat_template_kwargs.enable_thinking`,
  `thinking_token_budget`
  (https://docs.vllm.ai/en/stable/features/reasoning_outputs/).
- minimax: `<think>...</think>` stays in `content` and "must be preserved
  completely"; with `reasoning_split: true` it arrives in
  `reasoning_details`, which must be passed back as well
  (https://platform.minimax.io/docs/api-reference/text-openai-api,
  https://github.com/MiniMax-AI/MiniMax-M2/blob/main/README.md).
- groq: answers in `message.reasoning`; rejects reasoning in input ("property
  'reasoning_content' is unsupported"); `reasoning_effort` low/medium/high
  for gpt-oss (https://console.groq.com/docs/reasoning).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.settings import ReasoningSettings

NativeField = Literal["reasoning_content", "reasoning", "reasoning_details", "think_in_content"]


@dataclass(frozen=True, slots=True)
class ParamRule:
    """Set `path` in the request body to `value` when `setting` is set.

    `value` may be the marker "$value" (the setting's value, through
    `value_map` when given). `unless` names a setting that, when set, makes
    this rule yield (for parameters that take one of two forms, not both)."""

    setting: Literal["effort", "max_tokens"]
    path: tuple[str, ...]
    value: Any = "$value"
    value_map: tuple[tuple[str, str], ...] = ()
    unless: Literal["effort", "max_tokens"] | None = None


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    native_field: NativeField
    tool_turn_placeholder: str | None = None
    never_send: bool = False
    params: tuple[ParamRule, ...] = field(default=())


_EFFORT = ParamRule("effort", ("reasoning_effort",))

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect("openai", "reasoning_content", params=(_EFFORT,)),
        Dialect(
            "deepseek",
            "reasoning_content",
            tool_turn_placeholder="",
            params=(
                ParamRule("effort", ("thinking",), {"type": "enabled"}),
                _EFFORT,
                ParamRule("max_tokens", ("thinking",), {"type": "enabled"}),
            ),
        ),
        Dialect("kimi", "reasoning_content", tool_turn_placeholder=" "),
        Dialect(
            "openrouter",
            "reasoning_details",
            params=(
                ParamRule("effort", ("reasoning", "effort")),
                ParamRule("max_tokens", ("reasoning", "max_tokens"), unless="effort"),
            ),
        ),
        Dialect(
            "vllm",
            "reasoning",
            params=(
                ParamRule("effort", ("chat_template_kwargs", "enable_thinking"), True),
                _EFFORT,
                ParamRule("max_tokens", ("chat_template_kwargs", "enable_thinking"), True),
                ParamRule("max_tokens", ("thinking_token_budget",)),
            ),
        ),
        Dialect(
            "minimax",
            "think_in_content",
            # MiniMax has no effort or budget control; asking for either turns
            # on reasoning_split, so the reasoning arrives already separated.
            params=(
                ParamRule("effort", ("reasoning_split",), True),
                ParamRule("max_tokens", ("reasoning_split",), True),
            ),
        ),
        Dialect(
            "groq",
            "reasoning",
            never_send=True,
            params=(ParamRule("effort", ("reasoning_effort",), value_map=(("minimal", "low"),)),),
        ),
    )
}
DEFAULT_DIALECT = "openai"


Param = tuple[str, tuple[str, ...], Any]  # (setting, body path, value)


def request_params(dialect: Dialect, settings: ReasoningSettings) -> list[Param]:
    """The body parameters the settings add: nothing when reasoning is
    disabled, nothing for settings left unset."""
    if not settings.enabled:
        return []
    out: list[Param] = []
    for rule in dialect.params:
        value = getattr(settings, rule.setting)
        if value is None or (rule.unless and getattr(settings, rule.unless) is not None):
            continue
        value = dict(rule.value_map).get(value, value) if rule.value == "$value" else rule.value
        out.append((rule.setting, rule.path, value))
    return out


def apply_params(body: dict[str, Any], params: list[Param], from_headers: frozenset[str]) -> None:
    """Write the parameters into the body. A value the client put in the body
    itself wins, unless its setting came from a request header."""
    for setting, path, value in params:
        target = body
        for key in path[:-1]:
            child = target.get(key)
            if not isinstance(child, dict):
                child = {}
                target[key] = child
            target = child
        leaf = path[-1]
        if leaf in target and setting not in from_headers:
            continue
        target[leaf] = value
