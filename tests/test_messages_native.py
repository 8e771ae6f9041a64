"""What a Messages upstream sends, passed on (sans-IO): with route keys to
mask, a key split across two text or thinking deltas is masked in what a
client joins; events stay in order, at any split of the stream."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.doors.messages.native import DONE, NativeReader
from proxy.keymask import MASK, KeyMask

ROUTE_KEY = "rk-route-secret-0123456789"
PIECES = ["plain ", ROUTE_KEY, "rk-", "r", "k-route", "-secret-0123456789", " "]


def seal(text: str, artefacts: dict[str, Any]) -> str:
    return "sealed:" + text


def ev(name: str, **data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def delta(index: int, kind: str, field: str, text: str) -> bytes:
    return ev("content_block_delta", index=index, delta={"type": kind, field: text})


def stream(thinking: list[str], text: list[str], tool: list[str] | None = None) -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    out = ev("message_start", message=message)
    out += ev("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""})
    for piece in thinking:
        out += delta(0, "thinking_delta", "thinking", piece)
        out += b'event: ping\ndata: {"type": "ping"}\n\n'
    out += delta(0, "signature_delta", "signature", "sig")
    out += ev("content_block_stop", index=0)
    out += ev("content_block_start", index=1, content_block={"type": "text", "text": ""})
    for piece in text:
        out += delta(1, "text_delta", "text", piece)
    out += ev("content_block_stop", index=1)
    if tool is not None:
        use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        out += ev("content_block_start", index=2, content_block=use)
        for piece in tool:
            out += delta(2, "input_json_delta", "partial_json", piece)
        out += ev("content_block_stop", index=2)
    out += ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3})
    return out + ev("message_stop")


def read(out: bytes) -> list[dict[str, Any]]:
    events = []
    for block in out.split(b"\n\n"):
        if block:
            name, data = block.split(b"\n", 1)
            event = json.loads(data.removeprefix(b"data: "))
            assert name == b"event: " + event["type"].encode()
            events.append(event)
    return events


def joined(events: list[dict[str, Any]], field: str) -> str:
    return "".join(e["delta"].get(field, "") for e in events if e["type"] == "content_block_delta")


@given(
    st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), max_size=5),
    st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), max_size=5),
    st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), max_size=4),
    st.lists(st.integers(min_value=0, max_value=60), max_size=40),
)
def test_a_route_key_split_across_deltas_is_masked_in_what_a_client_joins(
    thinking: list[list[str]], text: list[list[str]], tool: list[list[str]], pieces: list[int]
) -> None:
    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    texts = ["".join(p) for p in text]
    data = stream(["".join(p) for p in thinking], texts, ["".join(p) for p in tool])
    reader = NativeReader(seal, mask=mask)
    out, pos = b"", 0
    for size in pieces:
        out += reader.feed(data[pos : pos + size])
        pos += size
    out += reader.feed(data[pos:]) + reader.finish()
    assert reader.state == DONE
    events = read(out)
    plain = read(NativeReader(seal).feed(data))
    for field in ("thinking", "text", "partial_json"):
        assert joined(events, field) == mask.text(joined(plain, field))
        assert ROUTE_KEY not in joined(events, field)
    # every other event as without a mask, in the same order
    assert [e["type"] for e in events if e["type"] != "content_block_delta"] == [
        e["type"] for e in plain if e["type"] != "content_block_delta"
    ]
    # each block's deltas come between its start and its stop
    index = None
    for e in events:
        if e["type"] == "content_block_start":
            index = e["index"]
        elif e["type"] == "content_block_delta":
            assert e["index"] == index
    # the stored turn keeps the text as the upstream sent it (the store masks it)
    assert reader.turn().content == joined(plain, "text")


def test_a_held_tail_waits_past_a_ping_and_goes_out_before_the_blocks_end() -> None:
    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    reader = NativeReader(seal, mask=mask)
    out = reader.feed(stream(["think rk-ro", "ute-secret-0123456789 done"], ["bye rk"]))
    events = read(out)
    assert joined(events, "thinking") == f"think {MASK} done"
    texts = [
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and "text" in e["delta"]
    ]
    assert texts == ["bye ", "rk"]  # "rk" began no key: alone, before the block's stop
    stops = [n for n, e in enumerate(events) if e["type"] == "content_block_stop"]
    assert events[stops[-1] - 1]["delta"] == {"type": "text_delta", "text": "rk"}


def test_hidden_thinking_keeps_its_block_and_envelope_but_not_its_text() -> None:
    """include-in-response false: no thinking_delta goes out, a start's own
    text is blanked, the envelope still holds the text; the same whole, byte
    by byte and with a route key mask, and the turn keeps the thinking."""
    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    data = stream(["Let me ", "think rk-"], ["Hi."])
    data = data.replace(b'"thinking": ""', b'"thinking": "Start. "', 1)
    whole = NativeReader(seal, hidden=True).feed(data)
    for reader in (NativeReader(seal, hidden=True), NativeReader(seal, mask=mask, hidden=True)):
        out = b"".join(reader.feed(data[n : n + 1]) for n in range(len(data))) + reader.finish()
        assert out == whole
        assert reader.state == DONE
        assert reader.turn().thinking[0].thought == "Start. Let me think rk-"
    events = read(whole)
    assert [e for e in events if e.get("delta", {}).get("type") == "thinking_delta"] == []
    assert events[1]["content_block"] == {"type": "thinking", "thinking": ""}
    assert joined(events, "signature") == "sealed:Start. Let me think rk-"
    assert joined(events, "text") == "Hi."
    message = {
        "content": [
            {"type": "thinking", "thinking": "Whole.", "signature": "sig"},
            {"type": "text", "text": "Hi."},
        ]
    }
    shown = NativeReader(seal, hidden=True).whole(message)
    assert shown["content"][0] == {"type": "thinking", "thinking": "", "signature": "sealed:Whole."}
