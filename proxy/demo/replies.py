"""What the simulated models say: short replies derived from the request.

There is no model behind the demo. A reply is a pure function of the request
body (the last user message, an offered tool, a tool result), so the same
request always gets the same words; nothing here is random and nothing does
I/O. How the words travel (which field, which tags) is decided in `wire.py`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from proxy.history.keys import content_text

DEFAULT_CITY = "Paris"

# Request fields that switch a provider's thinking off, as (path, value).
# Each provider spells it differently; the simulator honours all of them.
THINKING_OFF: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("thinking", "type"), "disabled"),  # DeepSeek, Kimi
    (("chat_template_kwargs", "enable_thinking"), False),  # vLLM / Qwen3
    (("reasoning_effort",), "none"),  # OpenAI, Groq (Qwen3), Ollama
    (("reasoning", "effort"), "none"),  # OpenRouter
    (("reasoning", "enabled"), False),  # OpenRouter
    (("reasoning", "exclude"), True),  # OpenRouter: reasons, but returns none
    (("include_reasoning",), False),  # Groq
    (("reasoning_format",), "hidden"),  # Groq
)

# Request fields that bound a provider's thinking, in tokens; the reasoning
# stops at the bound (a token is four characters here, as `wire.tokens` counts).
THINKING_BUDGET: tuple[tuple[str, ...], ...] = (
    ("thinking_token_budget",),  # vLLM
    ("reasoning", "max_tokens"),  # OpenRouter
    ("chat_template_kwargs", "thinking_budget"),  # SGLang / Qwen3
    ("thinking", "budget_tokens"),  # Anthropic's shape (GLM, others)
)
CHARS_PER_TOKEN = 4

_ARITHMETIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/x×÷])\s*(-?\d+(?:\.\d+)?)")
_WEATHER = re.compile(r"\b(weather|temperature|forecast)\b", re.IGNORECASE)
_CITY = re.compile(r"\b(?:in|for|at)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_GREETING = re.compile(r"^\s*(hi|hello|hey|good (morning|afternoon|evening))\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_][\w'-]{3,}")
# a few common words that say nothing about the topic
_STOPWORDS = frozenset(
    "what which when where with that this there their about would could should please tell "  # noqa: SIM905
    "explain does have from into your them they much many some just like".split()
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as it goes on the wire


@dataclass(frozen=True, slots=True)
class Reply:
    reasoning: str
    answer: str
    tool_calls: tuple[ToolCall, ...] = ()


def field_at(body: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = body
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    for path, off in THINKING_OFF:
        value = field_at(body, path)
        # `is` for booleans, so that 0 never counts as False nor 1 as True
        matches = value is off if isinstance(off, bool) else value == off
        if matches:
            return False
    return True


def effort_of(body: Mapping[str, Any]) -> str | None:
    effort = body.get("reasoning_effort")
    if effort is None:
        effort = field_at(body, ("reasoning", "effort"))
    return effort if isinstance(effort, str) else None


def budget_of(body: Mapping[str, Any]) -> int | None:
    """The thinking budget the request sets, in tokens, if any."""
    for path in THINKING_BUDGET:
        value = field_at(body, path)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _within(text: str, budget: int | None) -> str:
    """`text` cut to `budget` tokens, at a word's end where there is one."""
    limit = None if budget is None else budget * CHARS_PER_TOKEN
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit]
    if text[limit] != " " and " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip()


def compose_reply(body: Mapping[str, Any]) -> Reply:
    """The reply to a chat request whose `messages` is a non-empty list."""
    messages = [m for m in body.get("messages", ()) if isinstance(m, dict)]
    text = _last_user_text(messages)
    tool = _offered_tool(body.get("tools"), text)
    calls: tuple[ToolCall, ...] = ()
    if messages and messages[-1].get("role") == "tool":
        sentences, answer = _after_tool(messages)
        plan = _plan(text, tool)
        done = _calls_since_user(messages)
        if plan is not None and done < len(plan):
            # a series the user asked for, one call after another: the next one
            assert tool is not None  # a plan exists only for an offered tool
            sentences = [
                *sentences[:-1],
                f"Next I should call {tool.name} with {_shown(plan[done])}.",
            ]
            calls = (_tool_call(tool, plan[done], messages, done),)
            answer = ""
    elif tool is not None:
        sentences, calls = _call_tool(text, tool, messages, body)
        answer = ""
    else:
        sentences, answer = _answer(text)
    if not thinking_enabled(body):
        sentences = []
    else:
        effort = effort_of(body)
        if effort in ("minimal", "low"):
            sentences = sentences[:1]
        elif effort in ("high", "xhigh", "max"):
            sentences = [*sentences, "Checking once more before answering: it holds."]
    return Reply(_within(" ".join(sentences), budget_of(body)), answer, calls)


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            # what a client adds for the model (Claude Code's <system-reminder>
            # with today's date) is not the user's question
            text = _REMINDER.sub(" ", content_text(message.get("content")))
            return " ".join(text.split())
    return ""


def _snippet(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _answer(text: str) -> tuple[list[str], str]:
    if not text:
        return (
            ["The user sent no text.", "I should ask for a question."],
            "Ask me something, for example: What is 17 * 23?",
        )
    if match := _ARITHMETIC.search(text):
        return _arithmetic(*match.groups())
    if _WEATHER.search(text):
        city = _city(text)
        return (
            [
                f"The user asks about the weather in {city}.",
                "No weather tool was offered, and a simulator has no live data.",
                "I should say so and point to the tool loop.",
            ],
            f"I cannot look up the weather in {city} without a tool. Offer a get_weather "
            "tool (demo-kimi shows why its reasoning must go back) and I will call it.",
        )
    if _GREETING.match(text):
        return (
            ["The user greets me.", "A short greeting back, and a hint of what to try, fits."],
            "Hello! I am a simulated model. Ask me to compute 17 * 23, or ask demo-kimi "
            "about the weather with a get_weather tool.",
        )
    words = _key_words(text)
    topic = ", ".join(words) if words else _snippet(text, 30)
    return (
        [
            f'The user wrote: "{_snippet(text)}".',
            f"The key words are {topic}.",
            "A simulator has no knowledge, so a short answer that names the topic is enough.",
        ],
        f"You asked about {topic}. This is a simulated answer: my reasoning came in a "
        "separate field, not in this text.",
    )


def _arithmetic(left: str, op: str, right: str) -> tuple[list[str], str]:
    a, b = Fraction(left), Fraction(right)
    symbol = {"x": "*", "×": "*", "÷": "/"}.get(op, op)
    result: Fraction | None
    if symbol == "+":
        result = a + b
    elif symbol == "-":
        result = a - b
    elif symbol == "*":
        result = a * b
    else:
        result = a / b if b else None
    shown = f"{left} {symbol} {right}"
    if result is None:
        return (
            [f"The user asks for {shown}.", "Division by zero has no value."],
            f"{shown} is undefined: you cannot divide by zero.",
        )
    value = str(result.numerator) if result.denominator == 1 else f"{float(result):.6g}"
    return (
        [
            f"The user asks for {shown}.",
            f"Working it out: {shown} = {value}.",
            "One number answers it, so the answer stays short.",
        ],
        f"{shown} = {value}.",
    )


def _city(text: str) -> str:
    match = _CITY.search(text)
    return match.group(1) if match else DEFAULT_CITY


def _key_words(text: str) -> list[str]:
    seen: list[str] = []
    for word in _WORD.findall(text):
        lowered = word.lower()
        if lowered not in _STOPWORDS and lowered not in seen:
            seen.append(lowered)
    return seen[:3]


# -- tool calls ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    arguments: tuple[str, ...]  # the required parameters (else the first one), filled in


# `like this`: what a user quotes for a tool to take as it is (a command)
_QUOTED = re.compile(r"`([^`]+)`")
# a user who asks for several commands "at once" gets them in one turn
# (parallel tool calls); otherwise they come one per turn, in order
_AT_ONCE = re.compile(
    r"\b(at once|in parallel|parallel|simultaneously|at the same time)\b", re.IGNORECASE
)
_PLACE_PARAMS = ("city", "location", "place")


def _offered_tool(tools: Any, text: str = "") -> _Tool | None:
    """get_weather when offered, else the tool the user names (a coding
    agent offers dozens, and asks questions that need none), else none."""
    offered: list[_Tool] = []
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        params = function.get("parameters")
        params = params if isinstance(params, dict) else {}
        names = [n for n in params.get("required") or () if isinstance(n, str)]
        if not names:
            names = [n for n in params.get("properties") or {} if isinstance(n, str)][:1]
        offered.append(_Tool(function["name"], tuple(names)))
    if not offered:
        return None
    named = {w.lower() for w in _WORD.findall(text)}
    return next(
        (t for t in offered if t.name == "get_weather"),
        next((t for t in offered if t.name.lower() in named), None),
    )


def _arguments(tool: _Tool, text: str, quoted: str | None) -> dict[str, str]:
    arguments: dict[str, str] = {}
    for name in tool.arguments:
        if name in _PLACE_PARAMS:
            arguments[name] = _city(text)
        elif quoted is not None:
            arguments[name] = quoted
        else:
            arguments[name] = _snippet(text, 80)
    return arguments


def _plan(text: str, tool: _Tool | None) -> list[dict[str, str]] | None:
    """The calls for a user who quotes several commands for one tool, in
    order; None for a single call (one quoted span, or a tool that takes
    none of them)."""
    quoted = _QUOTED.findall(text)
    if tool is None or len(quoted) < 2:
        return None
    if all(name in _PLACE_PARAMS for name in tool.arguments):
        return None
    return [_arguments(tool, text, q) for q in quoted]


def _at_once(text: str, body: Mapping[str, Any]) -> bool:
    # a request that forbids parallel calls gets them one per turn
    return _AT_ONCE.search(text) is not None and body.get("parallel_tool_calls") is not False


def _shown(arguments: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in arguments.items())


def _tool_call(
    tool: _Tool, arguments: Mapping[str, str], messages: Sequence[Mapping[str, Any]], n: int
) -> ToolCall:
    # The id depends on the conversation so far: the same request gets the
    # same ids, different conversations (and calls) get different ones.
    seed = json.dumps(messages, sort_keys=True, default=str) + (f"#{n}" if n else "")
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return ToolCall(f"call_{digest[:24]}", tool.name, json.dumps(arguments, ensure_ascii=False))


def _call_tool(
    text: str, tool: _Tool, messages: Sequence[Mapping[str, Any]], body: Mapping[str, Any]
) -> tuple[list[str], tuple[ToolCall, ...]]:
    asks = f'The user asks: "{_snippet(text)}".'
    plan = _plan(text, tool)
    if plan is None:
        quoted = _QUOTED.search(text)
        arguments = _arguments(tool, text, quoted.group(1) if quoted else None)
        shown = _shown(arguments)
        return (
            [
                asks,
                f"The {tool.name} tool can answer this.",
                f"I should call {tool.name}" + (f" with {shown}." if shown else "."),
            ],
            (_tool_call(tool, arguments, messages, 0),),
        )
    if _at_once(text, body):
        calls = tuple(_tool_call(tool, a, messages, i) for i, a in enumerate(plan))
        listed = "; ".join(_shown(a) for a in plan)
        return (
            [
                asks,
                f"The {tool.name} tool can answer this, once for each of the {len(plan)} commands.",
                f"They do not depend on each other, so I call {tool.name} {len(plan)} times "
                f"at once: {listed}.",
            ],
            calls,
        )
    return (
        [
            asks,
            f"The {tool.name} tool can answer this, one call for each of the {len(plan)} "
            "commands, in order.",
            f"I should call {tool.name} with {_shown(plan[0])} first.",
        ],
        (_tool_call(tool, plan[0], messages, 0),),
    )


def _since_user(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages after the last user message (a tool loop's steps)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return list(messages[i + 1 :])
    return list(messages)


def _calls_since_user(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(
        len(m.get("tool_calls") or ())
        for m in _since_user(messages)
        if m.get("role") == "assistant"
    )


def _after_tool(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """Answer from the tool results since the user's last message."""
    steps = _since_user(messages)
    results = [m for m in steps if m.get("role") == "tool"]
    callers = [m for m in steps if m.get("role") == "assistant" and m.get("tool_calls")]
    names: dict[str, str] = {}
    for caller in callers:
        names.update(_call_names(caller))
    recalled = bool(callers) and all(_has_reasoning(c) for c in callers)
    found = [
        (
            names.get(str(r.get("tool_call_id")), "the tool"),
            _snippet(_output_of(content_text(r.get("content"))), 80),
        )
        for r in results
    ]
    return (
        [
            "My earlier reasoning is back in the context, so I know why I called the tool."
            if recalled
            else "My earlier reasoning is not in the context, so I rely on the tool result alone.",
            *(f'{name} returned "{result}".' for name, result in found),
            "I can answer now.",
        ],
        " ".join(f"According to {name}: {result}." for name, result in found),
    )


# Codex's exec_command result: a header (chunk id, wall time, exit code),
# then the command's output after this line
_OUTPUT_LINE = "\nOutput:\n"


def _output_of(result: str) -> str:
    """What a tool returned, without the header a shell tool puts before it."""
    _, found, output = result.partition(_OUTPUT_LINE)
    return output.strip() if found else result


# MiniMax's reasoning, sent back where the model wrote it: at the start of content
_LEADING_THINK = re.compile(r"\s*<think>(.*?)</think>", re.DOTALL)


def _has_reasoning(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message carries its reasoning back, in any of the
    shapes the imitated providers take it: `reasoning_content` (DeepSeek,
    Kimi), `reasoning` (vLLM), `reasoning_details` (OpenRouter, MiniMax's
    reasoning_split), `<think>` at the start of `content` (MiniMax)."""
    for name in ("reasoning_content", "reasoning"):
        earlier = message.get(name)
        if isinstance(earlier, str) and earlier.strip():
            return True
    for detail in message.get("reasoning_details") or ():
        said = (
            [detail.get(k) for k in ("text", "summary", "data")] if isinstance(detail, dict) else []
        )
        if any(isinstance(v, str) and v.strip() for v in said):
            return True
    content = message.get("content")
    tagged = _LEADING_THINK.match(content) if isinstance(content, str) else None
    return tagged is not None and tagged.group(1).strip() != ""


def _call_names(message: Mapping[str, Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            names[str(call.get("id"))] = str(call["function"].get("name", "the tool"))
    return names
