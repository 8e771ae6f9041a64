"""What the imitated providers refuse, with their real status and error body.

These are the errors that make reasoning handling matter: Kimi and DeepSeek
refuse an assistant tool-call message whose reasoning was dropped, Groq
refuses any reasoning in the input. The simulator answers them exactly as the
providers do (texts copied from live API responses, see proxy/dialects.py
for the sources), so a client talking to the simulator directly sees the
failure the proxy prevents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ProviderError:
    status: int
    body: dict[str, Any]


# (messages, thinking enabled) -> the refusal, or None when the request passes
Check = Callable[[Sequence[Any], bool], ProviderError | None]


def _tool_call_turns(messages: Sequence[Any]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (i, m)
        for i, m in enumerate(messages)
        if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
    ]


def kimi_reasoning_required(messages: Sequence[Any], thinking: bool) -> ProviderError | None:
    """Kimi K2.x: every assistant tool-call message needs `reasoning_content`
    while thinking is on; K2.5/K2.6 treat `""` as missing and accept `" "`."""
    if not thinking:
        return None
    for index, message in _tool_call_turns(messages):
        value = message.get("reasoning_content")
        if not isinstance(value, str) or value == "":
            text = (
                "thinking is enabled but reasoning_content is missing in assistant tool call "
                f"message at index {index}"
            )
            return ProviderError(
                400,
                {"error": {"type": "invalid_request_error", "message": text}, "type": "error"},
            )
    return None


def deepseek_reasoning_required(messages: Sequence[Any], thinking: bool) -> ProviderError | None:
    """DeepSeek thinking mode: turns with tool calls must carry their
    `reasoning_content` back; `""` is accepted."""
    if not thinking:
        return None
    for _, message in _tool_call_turns(messages):
        if not isinstance(message.get("reasoning_content"), str):
            return ProviderError(
                400,
                {
                    "error": {
                        "message": "The reasoning_content in the thinking mode must be passed "
                        "back to the API.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_request_error",
                    }
                },
            )
    return None


def groq_reasoning_unsupported(messages: Sequence[Any], thinking: bool) -> ProviderError | None:
    """Groq validates assistant messages strictly: reasoning fields are
    unknown properties, whatever the thinking settings."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for name in ("reasoning_content", "reasoning_details"):
            if name in message:
                where = f"messages.{index}"
                text = (
                    f"'{where}' : for 'role:assistant' the following must be satisfied"
                    f"[('{where}' : property '{name}' is unsupported)]"
                )
                return ProviderError(
                    400, {"error": {"message": text, "type": "invalid_request_error"}}
                )
    return None
