"""Upstream dialects: how each kind of upstream wants reasoning, as data.

A dialect says how reasoning goes back upstream in its own form
(`native_field`), whether assistant tool-call turns need the reasoning key
even when empty (`tool_turn_placeholder`), whether reasoning may be sent at
all (`never_send`), whether `include_in_context: auto` sends stored
reasoning back on tool-call turns (`auto_include`), and how the request-side
settings map to body parameters (`params`, and `families` for model families
whose controls differ). Nothing here branches on a dialect's name.

Which dialect a request gets (`dialect_for`): the route's explicit dialect,
else the upstream host's (`HOSTS`), else the model name's (`MAKERS`), else
`openai`. Upstreams that serve many makers' models (`multi_vendor`) keep
their own wire format but also re-inject where the model's maker needs it.

Request parameters (`plan_params`): `enabled: false` sends the off switch
(the `enabled` rules); an effort goes to the nearest value the upstream
accepts (`choices`, lowest first), `none` to the off switch where there is
one; `max_tokens` goes to the upstream's budget. A setting the upstream
cannot honour sends nothing and is named in `ignored`.

`top_k` (Anthropic's sampling parameter, which the Messages door
translates) is no parameter of OpenAI's own Chat Completions API, but the
compatible servers behind most routes take it (vLLM, SGLang, llama.cpp,
Ollama and LM Studio among their sampling parameters; OpenRouter passes it to
providers that have it), so it goes upstream as written. Groq validates a
request's properties strictly (it refuses a `reasoning_content` it does not
know with a 400), so there it is dropped and named (`top_k`).

Provider formats, as their documentation describes them:
- openai: `reasoning_effort` on Chat Completions; `none` on gpt-5.1 and
  later (gpt-5.1: none/low/medium/high; xhigh after gpt-5.1-codex-max),
  minimal/low/medium/high on gpt-5, low/medium/high on the o-series and
  gpt-oss; gpt-5-pro only high; models that do not reason refuse the
  parameter (https://platform.openai.com/docs/api-reference/chat/create,
  https://platform.openai.com/docs/guides/reasoning). The o-series and
  gpt-5 refuse `max_tokens` ("Use 'max_completion_tokens' instead"), so the
  translating doors write their output limit there for those models.
  Unknown upstreams get this dialect, and an unknown model gets the effort
  as given.
- deepseek: `reasoning_content` in responses; thinking mode on by default,
  toggled with `thinking: {"type": "enabled" | "disabled"}`; effort with
  `reasoning_effort` low/high/max (minimal/low -> low, medium/high/xhigh ->
  high, max -> max by the API's own table; so the settings' top effort,
  xhigh, goes as max, else nothing would reach it); no thinking budget; "for
  turns that do perform tool calls, the reasoning_content must be fully
  passed back to the API in all subsequent requests", a turn being
  everything between two user messages, its final answer too (the zh-cn
  page: the reasoning_content of every assistant message between two user
  messages with tool calls between them goes back), `""` accepted, else 400
  (https://api-docs.deepseek.com/guides/thinking_mode).
- kimi: `reasoning_content` must stay on assistant tool-call messages, else
  400 "thinking is enabled but reasoning_content is missing in assistant tool
  call message at index N"; K2.5/K2.6 treat `""` as missing and accept one
  space. kimi-k2-thinking always thinks; kimi-k2.5 and kimi-k2.6 turn it off
  with `thinking: {"type": "disabled"}`; kimi-k2.7-code (and its highspeed
  variant) always thinks and refuses `"disabled"` with an error; no budget
  parameter (https://platform.kimi.ai/docs/guide/use-kimi-k2-thinking-model).
  kimi-k3 (and K3.1) always thinks and takes a top-level `reasoning_effort`
  low/high/max (https://platform.kimi.ai/docs/guide/use-reasoning-effort, as
  https://docs.agno.com/examples/models/moonshot/reasoning-effort quotes it),
  so the settings' top effort, xhigh, goes as max. Kimi Code's endpoint is
  `api.kimi.com/coding/v1` (https://www.kimi.com/code/docs/).
- openrouter: request `reasoning: {effort | max_tokens}` (one of the two),
  efforts xhigh/high/medium/low/minimal/none, `enabled: false` turns it off;
  pass `reasoning_details` back unmodified and in order ("useful
  specifically for tool calling"), or `reasoning` as a string
  (https://openrouter.ai/docs/use-cases/reasoning-tokens).
- vllm: `reasoning` field (renamed from `reasoning_content`; recent builds
  read only `reasoning` on input); `chat_template_kwargs.enable_thinking`
  (false turns Qwen3-style templates off), `reasoning_effort` (passed to
  the template), `thinking_token_budget`
  (https://docs.vllm.ai/en/stable/features/reasoning_outputs/).
- sglang: `reasoning_content`; `chat_template_kwargs` `enable_thinking` and
  `thinking_budget` are passed to the chat template (Qwen3's defines both),
  `reasoning_effort` likewise
  (https://docs.sglang.io/docs/advanced_features/thinking_budget).
- minimax: `<think>...</think>` stays in `content` and "must be preserved
  completely"; with `reasoning_split: true` it arrives in
  `reasoning_details`, which must be passed back as well (so reasoning
  that came in `reasoning_details` goes back there, not into `content`); in multi-turn
  function calls the whole assistant message goes back. M2 thinks always; no
  effort or budget parameter
  (https://platform.minimax.io/docs/api-reference/text-openai-api,
  https://github.com/MiniMax-AI/MiniMax-M2/blob/main/README.md).
- groq: answers in `message.reasoning`; rejects reasoning in input ("property
  'reasoning_content' is unsupported"); `reasoning_effort` low/medium/high
  for gpt-oss, none/default for Qwen3 (none turns it off)
  (https://console.groq.com/docs/reasoning).
- glm (Z.ai, bigmodel.cn): `reasoning_content`; thinking on by default, off
  with `thinking: {"type": "disabled"}`; with interleaved thinking "thinking
  blocks should be explicitly preserved and returned together with the tool
  results" (https://docs.z.ai/guides/capabilities/thinking-mode). GLM-5.2
  takes `reasoning_effort` high or max (low/medium -> high, xhigh -> max;
  https://developers.cloudflare.com/workers-ai/models/glm-5.2/ quoting Z.ai's
  mapping).
- dashscope (Alibaba Model Studio, Qwen): `reasoning_content`;
  `enable_thinking` true/false and `thinking_budget` as top-level body
  fields (the SDK's extra_body); no effort parameter
  (https://www.alibabacloud.com/help/en/model-studio/deep-thinking).
- xai: `reasoning_effort` low/high on grok-3-mini, none/low/medium/high on
  grok-4.3, low/medium/high on grok-4.5; other Grok models refuse it;
  encrypted reasoning goes back only on the Responses API
  (https://docs.x.ai/docs/guides/reasoning).
- gemini (the OpenAI-compatible endpoint): `reasoning_effort`
  minimal/low/medium/high, `none` turns thinking off on 2.5 Flash models only
  (2.5 Pro and 3 cannot turn it off); a budget goes in
  `extra_body.google.thinking_config.thinking_budget`, never together with
  `reasoning_effort` (https://ai.google.dev/gemini-api/docs/openai). Gemini 3
  refuses a function call sent back without its thought signature
  (`tool_calls[].extra_content.google.thought_signature` on this endpoint);
  history it did not produce may carry `skip_thought_signature_validator`
  (https://ai.google.dev/gemini-api/docs/thought-signatures).
- together: answers in `reasoning`; hybrid models toggle with `reasoning:
  {"enabled": true | false}`, others take `reasoning_effort` low/medium/high
  (https://docs.together.ai/docs/inference/chat/reasoning).
- fireworks: `reasoning_content`; `reasoning_effort`, or the
  Anthropic-compatible `thinking: {"type": "enabled", "budget_tokens": N}`;
  for interleaved thinking "you must include the reasoning_content from
  previous assistant turns", which models without it ignore
  (https://docs.fireworks.ai/guides/reasoning).
- litellm (and other Anthropic-compatible chat upstreams): answers in
  `reasoning_content` plus `thinking_blocks` (`thinking` with a `signature`,
  `redacted_thinking` with `data`), which go back on the assistant message
  as they came, signatures unchanged (Anthropic needs them on tool-use
  turns); `reasoning_effort` low/medium/high, or `thinking: {"type":
  "enabled", "budget_tokens": N}` (https://docs.litellm.ai/docs/reasoning_content).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from proxy.settings import ReasoningSettings

NativeField = Literal[
    "reasoning_content", "reasoning", "reasoning_details", "think_in_content", "thinking_blocks"
]
Control = Literal["enabled", "effort", "max_tokens"]
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # lowest first


@dataclass(frozen=True, slots=True)
class ParamRule:
    """Set `path` in the request body to `value` for one setting.

    `enabled` rules are the off switch: they apply when reasoning is
    disabled. `effort` and `max_tokens` rules apply when that setting is set
    and reasoning is enabled. `value` may be the marker "$value": the
    setting's value (an effort moved to the nearest of `choices` when they
    are given), then through `value_map`. `unless` names a setting that,
    when set, makes this rule yield (parameters that take one of two forms,
    not both). `on` is an off switch's other position: what a client's own
    off switch in the body becomes when a header turns reasoning on (None:
    the switch has no plain "on", e.g. an effort that doubles as off).
    `alike`: other body paths that tell this upstream the same (another
    spelling it takes, or a control it takes only instead of this one): a
    body holding one keeps it and gets nothing for this setting, unless a
    header set the setting, which removes them, so the upstream never gets
    two controls that disagree."""

    setting: Control
    path: tuple[str, ...]
    value: Any = "$value"
    value_map: tuple[tuple[str, str], ...] = ()
    unless: Control | None = None
    choices: tuple[str, ...] = ()
    on: Any = None
    alike: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Family:
    """The parameters of the models whose lower-cased name matches `models`
    (a regular expression, searched anywhere in the name)."""

    models: str
    params: tuple[ParamRule, ...] = ()


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    native_field: NativeField
    tool_turn_placeholder: str | None = None
    never_send: bool = False
    params: tuple[ParamRule, ...] = field(default=())
    # model families with their own parameters; the first match replaces `params`
    families: tuple[Family, ...] = ()
    # include_in_context auto: stored reasoning goes back on tool-call turns
    auto_include: bool = False
    # a user turn that made tool calls needs the reasoning (and the
    # placeholder) on every assistant message in it, its final answer too,
    # not only on the messages that call tools
    whole_tool_turns: bool = False
    # serves many makers' models: auto_include also where the model's maker needs it
    multi_vendor: bool = False
    # (path inside a tool call, value) written on the first call of an
    # assistant message when the client sent none there
    tool_call_signature: tuple[tuple[str, ...], str] | None = None
    # models (a regular expression over the lower-cased name) that refuse
    # `max_tokens` and take the output limit as `max_completion_tokens`
    completion_limit_models: str | None = None
    # takes chat's non-standard `top_k` (a translating door drops it where not)
    top_k: bool = True

    def output_limit(self, model: str) -> str:
        """The body key of the output-token limit for this model name."""
        pattern = self.completion_limit_models
        if pattern is not None and _pattern(pattern).search(model.lower()):
            return "max_completion_tokens"
        return "max_tokens"

    def controls(self, model: str) -> tuple[ParamRule, ...]:
        """The parameter rules for this model name."""
        lowered = model.lower()
        for family in self.families:
            if _pattern(family.models).search(lowered):
                return family.params
        return self.params


@functools.lru_cache(maxsize=256)
def _pattern(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _effort(*choices: str) -> ParamRule:
    return ParamRule("effort", ("reasoning_effort",), choices=choices)


def _levels(*choices: str, off: str) -> tuple[ParamRule, ...]:
    """`reasoning_effort` with these values, lowest first; `off` is what
    `enabled: false` sends (`none` where the model has it, else its lowest)."""
    return (_effort(*choices), ParamRule("enabled", ("reasoning_effort",), off))


def _off(path: tuple[str, ...], value: Any, on: Any = None) -> ParamRule:
    return ParamRule("enabled", path, value, on=on)


_EFFORT = ParamRule("effort", ("reasoning_effort",))
_GEMINI_BUDGET = ("extra_body", "google", "thinking_config", "thinking_budget")
_REASONING_EFFORT = (("reasoning_effort",),)
# an effort, or `thinking` with a budget, not both (Fireworks, LiteLLM)
_EFFORT_OR_THINKING = (
    ParamRule(
        "effort", ("reasoning_effort",), choices=("low", "medium", "high"), alike=(("thinking",),)
    ),
    ParamRule(
        "max_tokens", ("thinking", "type"), "enabled", unless="effort", alike=_REASONING_EFFORT
    ),
    ParamRule(
        "max_tokens", ("thinking", "budget_tokens"), unless="effort", alike=_REASONING_EFFORT
    ),
)
_THINKING_OFF = _off(("thinking", "type"), "disabled", "enabled")


def _gemini(off: str) -> tuple[ParamRule, ...]:
    """Gemini's effort, budget and off effort: `reasoning_effort` or a
    thinking budget, never both. The budget is written as Google's REST
    examples write it; the `openai` SDK's `extra_body` sends it at the top."""
    budgets = (_GEMINI_BUDGET, _GEMINI_BUDGET[1:])
    return (
        ParamRule(
            "effort",
            ("reasoning_effort",),
            choices=("minimal", "low", "medium", "high"),
            alike=budgets,
        ),
        ParamRule(
            "max_tokens",
            _GEMINI_BUDGET,
            unless="effort",
            alike=(("reasoning_effort",), _GEMINI_BUDGET[1:]),
        ),
        ParamRule("enabled", ("reasoning_effort",), off, alike=budgets),
    )


_TEMPLATE_ON = ("chat_template_kwargs", "enable_thinking")

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(
            "openai",
            "reasoning_content",
            params=(_EFFORT,),
            completion_limit_models=r"(^|/)(o[1-9]|gpt-5)",
            families=(
                Family(r"gpt-5(\.\d+)?-chat"),  # not a reasoning model
                Family(r"gpt-5(\.\d+)?-pro", _levels("high", off="high")),
                Family(
                    r"gpt-5\.1-codex-max|gpt-5\.[2-9]",
                    _levels("none", "low", "medium", "high", "xhigh", off="none"),
                ),
                Family(
                    r"gpt-5\.1",
                    _levels("none", "low", "medium", "high", off="none"),
                ),
                Family(
                    r"(^|/)gpt-5",
                    _levels("minimal", "low", "medium", "high", off="minimal"),
                ),
                Family(
                    r"(^|/)(o1(?!-mini|-preview)|o3|o4)\b|gpt-oss",
                    _levels("low", "medium", "high", off="low"),
                ),
            ),
        ),
        Dialect(
            "deepseek",
            "reasoning_content",
            tool_turn_placeholder="",
            auto_include=True,
            whole_tool_turns=True,
            params=(
                ParamRule("effort", ("thinking", "type"), "enabled"),
                ParamRule("effort", ("reasoning_effort",), value_map=(("xhigh", "max"),)),
                _THINKING_OFF,
            ),
        ),
        Dialect(
            "kimi",
            "reasoning_content",
            tool_turn_placeholder=" ",
            auto_include=True,
            families=(
                Family(r"kimi-k2\.\d+-code"),  # always thinks; "disabled" is an error
                Family(r"kimi-k2\.[5-9]", (_THINKING_OFF,)),
                Family(
                    r"kimi-k3",
                    (
                        ParamRule(
                            "effort",
                            ("reasoning_effort",),
                            choices=("low", "high", "xhigh"),
                            value_map=(("xhigh", "max"),),
                        ),
                    ),
                ),
            ),
        ),
        Dialect(
            "openrouter",
            "reasoning_details",
            auto_include=True,
            multi_vendor=True,
            params=(
                # OpenRouter takes chat's `reasoning_effort` too, and an
                # effort or a budget, not both
                ParamRule(
                    "effort",
                    ("reasoning", "effort"),
                    alike=(("reasoning_effort",), ("reasoning", "max_tokens")),
                ),
                ParamRule(
                    "max_tokens",
                    ("reasoning", "max_tokens"),
                    unless="effort",
                    alike=(("reasoning", "effort"), ("reasoning_effort",)),
                ),
                _off(("reasoning", "enabled"), False, True),
            ),
        ),
        Dialect(
            "vllm",
            "reasoning",
            multi_vendor=True,
            params=(
                ParamRule("effort", _TEMPLATE_ON, True),
                _EFFORT,
                ParamRule("max_tokens", _TEMPLATE_ON, True),
                ParamRule("max_tokens", ("thinking_token_budget",)),
                _off(_TEMPLATE_ON, False, True),
            ),
        ),
        Dialect(
            "sglang",
            "reasoning_content",
            multi_vendor=True,
            params=(
                ParamRule("effort", _TEMPLATE_ON, True),
                _EFFORT,
                ParamRule("max_tokens", _TEMPLATE_ON, True),
                ParamRule("max_tokens", ("chat_template_kwargs", "thinking_budget")),
                _off(_TEMPLATE_ON, False, True),
            ),
        ),
        # MiniMax M2 has no effort, budget or off switch
        Dialect("minimax", "think_in_content", auto_include=True),
        Dialect(
            "groq",
            "reasoning",
            never_send=True,
            top_k=False,
            families=(
                Family(r"qwen3", (_off(("reasoning_effort",), "none"),)),
                Family(
                    r"gpt-oss",
                    _levels("low", "medium", "high", off="low"),
                ),
            ),
        ),
        Dialect(
            "glm",
            "reasoning_content",
            auto_include=True,
            params=(_THINKING_OFF,),
            families=(
                Family(
                    r"glm-5\.[2-9]|glm-[6-9]",
                    (
                        ParamRule(
                            "effort",
                            ("reasoning_effort",),
                            choices=("high", "xhigh"),
                            value_map=(("xhigh", "max"),),
                        ),
                        _THINKING_OFF,
                    ),
                ),
            ),
        ),
        Dialect(
            "dashscope",
            "reasoning_content",
            params=(
                ParamRule("max_tokens", ("enable_thinking",), True),
                ParamRule("max_tokens", ("thinking_budget",)),
                _off(("enable_thinking",), False, True),
            ),
        ),
        Dialect(
            "xai",
            "reasoning_content",
            families=(
                Family(r"grok-3-mini", _levels("low", "high", off="low")),
                Family(
                    r"grok-4\.3",
                    _levels("none", "low", "medium", "high", off="none"),
                ),
                Family(
                    r"grok-4\.5",
                    _levels("low", "medium", "high", off="low"),
                ),
            ),
        ),
        Dialect(
            "gemini",
            "reasoning_content",
            never_send=True,
            tool_call_signature=(
                ("extra_content", "google", "thought_signature"),
                "skip_thought_signature_validator",
            ),
            # `reasoning_effort` and a thinking budget are not taken together
            params=_gemini(off="minimal"),
            families=(Family(r"gemini-2\.5-flash", _gemini(off="none")),),
        ),
        Dialect(
            "together",
            "reasoning",
            multi_vendor=True,
            params=(
                _effort("low", "medium", "high"),
                _off(("reasoning", "enabled"), False, True),
            ),
        ),
        Dialect(
            "fireworks",
            "reasoning_content",
            auto_include=True,
            multi_vendor=True,
            params=_EFFORT_OR_THINKING,
        ),
        Dialect(
            "litellm",
            "thinking_blocks",
            auto_include=True,
            multi_vendor=True,
            params=_EFFORT_OR_THINKING,
        ),
    )
}
DEFAULT_DIALECT = "openai"
DIALECT_NAMES = ("auto", *DIALECTS)  # what a route's `dialect:` may say

# The upstream host decides the dialect (globs on the lower-cased host name).
HOSTS: tuple[tuple[str, str], ...] = (
    ("api.openai.com", "openai"),
    ("api.deepseek.com", "deepseek"),
    ("api.moonshot.ai", "kimi"),
    ("api.moonshot.cn", "kimi"),
    ("api.kimi.com", "kimi"),
    ("openrouter.ai", "openrouter"),
    ("api.groq.com", "groq"),
    ("api.minimax.io", "minimax"),
    ("api.minimaxi.com", "minimax"),
    ("open.bigmodel.cn", "glm"),
    ("api.z.ai", "glm"),
    ("dashscope*.aliyuncs.com", "dashscope"),
    ("api.x.ai", "xai"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("api.together.xyz", "together"),
    ("api.together.ai", "together"),
    ("api.fireworks.ai", "fireworks"),
)
# A model name that names its maker unambiguously (searched, lower-cased).
MAKERS: tuple[tuple[str, str], ...] = (
    (r"kimi|moonshot", "kimi"),
    (r"deepseek", "deepseek"),
    (r"minimax", "minimax"),
    (r"glm", "glm"),
    (r"grok", "xai"),
)

DialectSource = Literal["config", "host", "model"]


def host_dialect(host: str) -> Dialect | None:
    """The dialect the upstream host stands for, if it is a known one."""
    lowered = host.lower().rstrip(".")
    for glob, name in HOSTS:
        if fnmatch.fnmatchcase(lowered, glob):
            return DIALECTS[name]
    return None


def maker_dialect(model: str | None) -> Dialect | None:
    """The dialect of the model's maker, when its name says so."""
    if not model:
        return None
    lowered = model.lower()
    for regex, name in MAKERS:
        if _pattern(regex).search(lowered):
            return DIALECTS[name]
    return None


# model names longer than this (the body's to choose) are not remembered by
# name: a cache of names would hold whatever clients send
REMEMBERED_NAME = 256


def dialect_for(route_dialect: Dialect, source: DialectSource, model: str | None) -> Dialect:
    """`_dialect_for`, remembered for model names of a bounded length (the
    cache holds what clients send)."""
    if model is not None and len(model) > REMEMBERED_NAME:
        return _dialect_for(route_dialect, source, model)
    return _remembered_dialect_for(route_dialect, source, model)


def _dialect_for(route_dialect: Dialect, source: DialectSource, model: str | None) -> Dialect:
    """The dialect one request gets: the route's (set in the config or by
    its host), else the model maker's, else openai. An upstream serving many
    makers' models keeps its wire format and takes on the maker's need to
    have reasoning back on tool-call turns."""
    maker = maker_dialect(model)
    if source == "model":
        return maker or DIALECTS[DEFAULT_DIALECT]
    needs = maker is not None and maker.auto_include
    if route_dialect.multi_vendor and needs and not route_dialect.auto_include:
        return replace(route_dialect, auto_include=True)
    return route_dialect


_remembered_dialect_for = functools.lru_cache(maxsize=4096)(_dialect_for)

Param = tuple[str, tuple[str, ...], Any]  # (setting, body path, value)
Alike = tuple[tuple[str, tuple[str, ...]], ...]  # (setting, body path): `ParamRule.alike`
# the setting of a Param that turns a client's own off switch back on: it
# applies only where the body holds that switch and a header enabled reasoning
SWITCH_ON = "enabled:on"


@dataclass(frozen=True, slots=True)
class ParamPlan:
    """The body parameters the settings add, the settings the upstream
    cannot honour (nothing was sent for them), and the body's other spellings
    of the settings whose parameters are added (`ParamRule.alike`)."""

    params: list[Param]
    ignored: tuple[str, ...] = ()
    alike: Alike = ()


def nearest_effort(value: str, choices: tuple[str, ...]) -> str:
    """`value`, or the accepted effort closest to it (a tie goes up)."""
    if not choices or value in choices:
        return value
    rank = EFFORTS.index
    return min(choices, key=lambda c: (abs(rank(c) - rank(value)), -rank(c)))


def plan_params(dialect: Dialect, settings: ReasoningSettings, model: str = "") -> ParamPlan:
    """What the settings add to a request for this model on this upstream."""
    rules = dialect.controls(model)
    alike = tuple(dict.fromkeys((r.setting, path) for r in rules for path in r.alike))
    off = [r for r in rules if r.setting == "enabled"]
    if not settings.enabled:
        if not off:
            return ParamPlan([], ("enabled",))
        return ParamPlan([("enabled", r.path, r.value) for r in off], alike=alike)
    out: list[Param] = [(SWITCH_ON, r.path, r.on) for r in off if r.on is not None]
    ignored: list[str] = []
    effort = settings.effort
    if effort is not None:
        if effort == "none" and off:
            # no effort at all: the off switch says it best
            out += [("effort", r.path, r.value) for r in off]
        else:
            found = _apply(rules, "effort", effort, settings, out)
            if not found:
                ignored.append("effort")
    budget = settings.max_tokens
    if budget is not None and not _apply(rules, "max_tokens", budget, settings, out):
        ignored.append("max_tokens")
    return ParamPlan(out, tuple(ignored), alike)


def _apply(
    rules: tuple[ParamRule, ...],
    setting: Control,
    value: Any,
    settings: ReasoningSettings,
    out: list[Param],
) -> bool:
    """Add the rules of one setting; False when none applies."""
    found = False
    for rule in rules:
        if rule.setting != setting:
            continue
        if rule.unless and getattr(settings, rule.unless) is not None:
            continue
        found = True
        if rule.value == "$value":
            sent = nearest_effort(value, rule.choices) if setting == "effort" else value
            sent = dict(rule.value_map).get(sent, sent)
        else:
            sent = rule.value
        out.append((setting, rule.path, sent))
    return found


def request_params(dialect: Dialect, settings: ReasoningSettings, model: str = "") -> list[Param]:
    """The body parameters the settings add (see `plan_params`)."""
    return plan_params(dialect, settings, model).params


def _switches_off(rule: ParamRule) -> bool:
    """An off switch that stops thinking: one with an "on" position, or an
    effort of `none` (not a lowest effort standing in for one)."""
    return rule.setting == "enabled" and (rule.on is not None or rule.value == "none")


# Body fields that switch a model's thinking off, as (path, value), whoever
# wrote them (the client, or a setting's off switch): a reply to such a
# request does not start inside the reasoning, so a route's
# `implicit_open_tag` does not apply to it (a Qwen3 template with thinking
# off closes the empty block in the prompt; the reply has no `</think>`).
# The dialects' off switches (`chat_template_kwargs.enable_thinking`,
# `enable_thinking`, `reasoning.enabled` false, `thinking.type` disabled,
# `reasoning_effort` none), and what the table does not write:
# OpenRouter's `reasoning.effort` none.
THINKING_OFF: tuple[tuple[tuple[str, ...], Any], ...] = tuple(
    dict.fromkeys(
        [
            *(
                (rule.path, rule.value)
                for dialect in DIALECTS.values()
                for rules in (dialect.params, *(f.params for f in dialect.families))
                for rule in rules
                if _switches_off(rule)
            ),
            (("reasoning", "effort"), "none"),
        ]
    )
)


def thinking_off(body: dict[str, Any]) -> bool:
    """Whether the request body switches thinking off (`THINKING_OFF`)."""
    for path, off in THINKING_OFF:
        value: Any = body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        # `is` for booleans, so that 0 is not False
        if value is off if isinstance(off, bool) else value == off:
            return True
    return False


def apply_params(
    body: dict[str, Any],
    params: list[Param],
    from_headers: frozenset[str],
    alike: Alike = (),
) -> None:
    """Write the parameters into the body. A value the client put in the body
    itself wins, in the parameter's place or an `alike` one, unless its
    setting came from a request header, whose value then replaces the body's
    (its alike places removed); so a client's own off switch yields to
    `X-Reasoning-Enabled: true` (and nothing is added where the body has no
    switch)."""
    held = {setting for setting, path in alike if _holds(body, path)}
    for setting, path in alike:
        if setting in from_headers and any(s == setting for s, _, _ in params):
            _remove(body, path)
    for setting, path, value in params:
        if setting == SWITCH_ON:
            if "enabled" in from_headers:
                _switch_on(body, path, value)
            continue
        if setting in held and setting not in from_headers:
            continue
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


def _holds(body: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether the body has a value at `path`."""
    target: Any = body
    for key in path:
        if not isinstance(target, dict) or key not in target:
            return False
        target = target[key]
    return True


def _remove(body: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove `path` from the body, and the objects that leaves empty."""
    parents: list[tuple[dict[str, Any], str]] = []
    target = body
    for key in path[:-1]:
        child = target.get(key)
        if not isinstance(child, dict):
            return
        parents.append((target, key))
        target = child
    if path[-1] not in target:
        return
    del target[path[-1]]
    for parent, key in parents[::-1]:
        if parent[key]:
            return
        del parent[key]


def _switch_on(body: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `path` to `value` only where the body already holds that key."""
    target: Any = body
    for key in path[:-1]:
        target = target.get(key)
        if not isinstance(target, dict):
            return
    if path[-1] in target:
        target[path[-1]] = value
