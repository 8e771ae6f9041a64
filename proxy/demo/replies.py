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
    tool_call: ToolCall | None = None


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


def compose_reply(body: Mapping[str, Any], *, calls_tools: bool) -> Reply:
    """The reply to a chat request whose `messages` is a non-empty list."""
    messages = [m for m in body.get("messages", ()) if isinstance(m, dict)]
    if messages and messages[-1].get("role") == "tool":
        sentences, answer = _after_tool(messages)
        call = None
    else:
        text = _last_user_text(messages)
        tool = _offered_tool(body.get("tools"), text) if calls_tools else None
        if tool is not None:
            sentences, call = _call_tool(text, tool, messages)
            answer = ""
        else:
            sentences, answer = _answer(text)
            call = None
    if not thinking_enabled(body):
        sentences = []
    else:
        effort = effort_of(body)
        if effort in ("minimal", "low"):
            sentences = sentences[:1]
        elif effort in ("high", "xhigh", "max"):
            sentences = [*sentences, "Checking once more before answering: it holds."]
    return Reply(" ".join(sentences), answer, call)


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
            "tool (try the model demo-kimi) and I will call it.",
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


def _call_tool(
    text: str, tool: _Tool, messages: Sequence[Mapping[str, Any]]
) -> tuple[list[str], ToolCall]:
    arguments: dict[str, str] = {}
    quoted = _QUOTED.search(text)
    for name in tool.arguments:
        if name in ("city", "location", "place"):
            arguments[name] = _city(text)
        elif quoted is not None:
            arguments[name] = quoted.group(1)
        else:
            arguments[name] = _snippet(text, 80)
    shown = ", ".join(f"{k}={v}" for k, v in arguments.items())
    # The id depends on the conversation so far: the same request gets the
    # same id, different conversations get different ones.
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()
    call = ToolCall(f"call_{digest[:24]}", tool.name, json.dumps(arguments, ensure_ascii=False))
    return (
        [
            f'The user asks: "{_snippet(text)}".',
            f"The {tool.name} tool can answer this.",
            f"I should call {tool.name}" + (f" with {shown}." if shown else "."),
        ],
        call,
    )


def _after_tool(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """Answer from the tool results that end the conversation."""
    results: list[Mapping[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, message)
    caller = messages[-len(results) - 1] if len(messages) > len(results) else {}
    names = _call_names(caller)
    earlier = caller.get("reasoning_content") or caller.get("reasoning")
    recalled = isinstance(earlier, str) and earlier.strip() != ""
    found = [
        (
            names.get(str(r.get("tool_call_id")), "the tool"),
            _snippet(content_text(r.get("content")), 80),
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


def _call_names(message: Mapping[str, Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            names[str(call.get("id"))] = str(call["function"].get("name", "the tool"))
    return names
