"""What the client of a stream is shown, for people watching it live (pure).

The normalizer reports each delta of a stream's first choice, as it goes
out: a delta the quick path passed through (`delta`), or the separated
segments of one it rewrote (`segments`, and its `refusal`). A Tap keeps
them as (kind, text) pairs, kind `reasoning` or `content` (a refusal's text
too), until the relay takes them for the live feed. Reasoning the client is
not shown (include-in-response false, or output `none`) is left out, as it
is from the client's own stream.
"""

from __future__ import annotations

from typing import Any

from proxy.reasoning.blocks import Json
from proxy.reasoning.channels import V


class Tap:
    __slots__ = ("include", "pairs")

    def __init__(self, include: bool = True) -> None:
        self.include = include  # is the reasoning shown to the client?
        self.pairs: list[tuple[str, str]] = []

    def delta(self, index: Any, delta: Json) -> None:
        """A delta that went out in the default shape."""
        if index != 0:
            return
        reasoning = delta.get("reasoning_content")
        if reasoning and type(reasoning) is str and self.include:
            self.pairs.append(("reasoning", reasoning))
        content = delta.get("content")
        if content and type(content) is str:
            self.pairs.append(("content", content))

    def segments(self, index: Any, segments: list[tuple[int, str]]) -> None:
        """Separated segments, as reasoning and answer whatever the shape
        the client gets them in."""
        if index != 0:
            return
        reasoning = "".join(t for k, t in segments if k != V)
        if reasoning and self.include:
            self.pairs.append(("reasoning", reasoning))
        content = "".join(t for k, t in segments if k == V)
        if content:
            self.pairs.append(("content", content))

    def refusal(self, index: Any, delta: Json) -> None:
        """A delta's `refusal`: the answer the model gave instead, shown as one."""
        text = delta.get("refusal") if index == 0 else None
        if text and type(text) is str:
            self.pairs.append(("content", text))
