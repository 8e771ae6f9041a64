"""Envelopes sealed while the Messages door kept the `index` of streamed
`thinking_blocks` pieces (clients still hold them) open into blocks
without it."""

from __future__ import annotations

from typing import Any

from proxy.doors.messages.request import translate
from proxy.sealing import Sealed, Sealer

SEALER = Sealer(b"test secret")
TENANT = "tenant-a"


def test_an_envelope_with_numbered_blocks_goes_back_without_the_numbers() -> None:
    numbered = [
        {"index": 0, "type": "thinking", "thinking": "a", "signature": "s-a"},
        {"index": 1, "type": "redacted_thinking", "data": "opaque"},
    ]
    signature = SEALER.seal(TENANT, Sealed("a", {"thinking_blocks": numbered}))
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "a", "signature": signature},
                    {"type": "text", "text": "Hello."},
                ],
            },
            {"role": "user", "content": "again"},
        ],
    }
    message = translate(body, lambda token: SEALER.open(TENANT, token)).payload["messages"][1]
    assert message["thinking_blocks"] == [
        {"type": "thinking", "thinking": "a", "signature": "s-a"},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
