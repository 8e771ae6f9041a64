"""Reading Anthropic Messages streams in tests: events parsed, each one
validated against the anthropic SDK's own event types, and accumulated into
the final Message the way the SDK's stream helper does."""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import (
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)
from pydantic import BaseModel

# SDK clients the running test opened; tests/conftest.py closes them after it
OPEN_CLIENTS: list[anthropic.Anthropic] = []


def sdk_client(base: str, api_key: str) -> anthropic.Anthropic:
    """An anthropic SDK client of the proxy at `base`, closed when the test ends."""
    sdk = anthropic.Anthropic(base_url=base, api_key=api_key, max_retries=0)
    OPEN_CLIENTS.append(sdk)
    return sdk


EVENT_TYPES: dict[str, type[BaseModel]] = {
    "message_start": RawMessageStartEvent,
    "message_delta": RawMessageDeltaEvent,
    "message_stop": RawMessageStopEvent,
    "content_block_start": RawContentBlockStartEvent,
    "content_block_delta": RawContentBlockDeltaEvent,
    "content_block_stop": RawContentBlockStopEvent,
}


def parse_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event; the name must match the data's type."""
    out = []
    for raw in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not raw.strip():
            continue
        name = None
        data = b""
        for line in raw.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data += line[6:]
        assert name is not None, raw
        parsed = orjson.loads(data)
        assert parsed["type"] == name, raw
        out.append((name, parsed))
    return out


def validated(events: list[tuple[str, dict[str, Any]]]) -> list[BaseModel]:
    """Each event as the SDK's type for it (pings and errors have none)."""
    models = []
    for name, data in events:
        if name in ("ping", "error"):
            continue
        models.append(EVENT_TYPES[name].model_validate(data, strict=False))
    return models


def accumulate(events: list[tuple[str, dict[str, Any]]]) -> Message:
    """The final Message, built by the SDK's own accumulator."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    for model in validated(events):
        snapshot = accumulate_event(
            event=model,  # type: ignore[arg-type]
            current_snapshot=snapshot,
            json_bufs=buffers,
        )
    assert snapshot is not None
    return Message.model_validate(snapshot.model_dump())


def assert_blocks_in_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Anthropic's block order: blocks numbered 0, 1, ... in the order they
    start; each one's deltas come between its start and its stop, and the
    next starts only after it stopped. A stream that ends with an error may
    leave its last block open."""
    open_index: int | None = None
    started = 0
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None, f"block {data['index']} started while {open_index} is open"
            assert data["index"] == started, (data["index"], started)
            open_index = started
            started += 1
        elif name == "content_block_delta":
            assert data["index"] == open_index, f"a delta for {data['index']}, {open_index} open"
        elif name == "content_block_stop":
            assert data["index"] == open_index, f"a stop for {data['index']}, {open_index} open"
            open_index = None
        elif name in ("message_delta", "message_stop"):
            assert open_index is None, f"{name} while block {open_index} is open"
