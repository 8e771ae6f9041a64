"""The seam between the one exchange path and a front door's wire.

The path speaks Chat Completions: it relays normalized chat SSE bytes (whole
events, read by read) and whole normalized chat completions. A door whose
wire is another API (Responses, Anthropic Messages) gives the driver an
`Encoder`, which turns that output into its own wire as it flows: `feed()`
per read (no buffering beyond what one event needs), `flush()` at the end,
`whole()` for a response that came at once (or an upstream's error body),
and `start_headers()` for the response head (its own content type, the
`X-Proxy-Dropped-*` headers). Chat completions has no encoder: its hot path
pays nothing for this seam.
"""

from __future__ import annotations

from typing import Protocol


class Encoder(Protocol):
    def start_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The response headers as the door sends them (a stream's or a whole one's)."""
        ...

    def feed(self, data: bytes) -> bytes:
        """Normalized chat SSE bytes (whole events) -> the door's bytes."""
        ...

    def flush(self) -> bytes:
        """The end of the stream (after [DONE] or an error event)."""
        ...

    def whole(self, status: int, body: bytes) -> bytes:
        """A whole normalized chat completion, or an OpenAI-shaped error body
        (status >= 400), as the door's body."""
        ...
