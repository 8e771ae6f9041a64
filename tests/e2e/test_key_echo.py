"""An upstream that quotes the route's key back: the key is masked on the
wire (already tested with the error paths), and also in what the proxy keeps
and shows: the stored turn, a stored Response and the live feed."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.ui.test_events import _watch

ROUTE_KEY = "sk-route-echo-0123456789"
CLIENT = {"Authorization": "Bearer sk-client-echo"}
CALL = {"index": 0, "id": "call_1", "type": "function"}


def echoing_stream() -> Stream:
    return Stream(
        [
            chunk({"reasoning_content": f"The key is {ROUTE_KEY}."}),
            chunk({"content": f"auth=Bearer {ROUTE_KEY}"}),
            chunk({"tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{}"}}]}),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": f'{{"k":"{ROUTE_KEY}"}}'}}]}
            ),
            chunk({}, "tool_calls"),
        ]
    )


def test_a_quoted_route_key_is_not_stored_nor_shown_live(upstream: FakeUpstream) -> None:
    whole = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": f"auth=Bearer {ROUTE_KEY}",
                    "reasoning_details": [{"type": "reasoning.text", "text": ROUTE_KEY}],
                },
                "finish_reason": "stop",
            }
        ]
    }
    events: list[dict[str, Any]] = []
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:

        async def scenario() -> list[httpx.Response]:
            ready = asyncio.Event()
            watch = asyncio.ensure_future(_watch(proxy.base, "sk-client-echo", events, ready))
            try:
                await asyncio.wait_for(ready.wait(), 5)
                upstream.script(echoing_stream(), Json(whole), Json(whole))
                async with httpx.AsyncClient(timeout=30) as client:
                    out = [
                        await client.post(
                            f"{proxy.url}/chat/completions",
                            headers={**CLIENT, "X-Conversation-Id": f"echo-{n}"},
                            json={
                                "model": "m",
                                "stream": n != 1,
                                "messages": [{"role": "user", "content": "hi"}],
                            },
                        )
                        for n in range(2)
                    ]
                    out.append(
                        await client.post(
                            f"{proxy.url}/responses",
                            headers=CLIENT,
                            json={"model": "m", "input": "hi"},
                        )
                    )
                for _ in range(100):
                    if sum(e["type"] == "turn_end" for e in events) >= 3:
                        break
                    await asyncio.sleep(0.05)
                return out
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

        answers = asyncio.run(scenario())
        assert [r.status_code for r in answers] == [200, 200, 200]
        stored = [
            httpx.get(f"{proxy.url}/conversations/echo-{n}", headers=CLIENT).text for n in range(2)
        ]
        response = httpx.get(f"{proxy.url}/responses/{answers[2].json()['id']}", headers=CLIENT)
        assert response.status_code == 200
        stored.append(response.text)
    for n, text in enumerate([*(r.text for r in answers), *stored]):
        assert ROUTE_KEY not in text, n
    assert "[REDACTED]" in stored[0]
    assert "[REDACTED]" in stored[1]
    assert sum(e["type"] == "turn_end" for e in events) == 3
    shown = [e["text"] for e in events if e["type"] == "delta"]
    assert shown
    assert not any(ROUTE_KEY in t for t in shown)
    assert any("[REDACTED]" in t for t in shown)


def test_a_route_key_split_across_two_reads_is_masked_on_the_live_feed(
    upstream: FakeUpstream,
) -> None:
    """Regression: the live feed masked each delta alone, and the page joins
    them, so a key the upstream sent in two reads showed whole; also in the
    answer, and with multibyte text around the split."""
    cut = len(ROUTE_KEY) // 2
    split = Stream(
        [
            chunk({"reasoning_content": f"Über den Schlüssel {ROUTE_KEY[:cut]}"}),
            chunk({"reasoning_content": f"{ROUTE_KEY[cut:]} – fertig."}),
            chunk({"content": f"Bearer {ROUTE_KEY[:3]}"}),
            chunk({"content": f"{ROUTE_KEY[3:]}"}),
            chunk({"content": " and sk-"}),  # the start of a key shape, then not a key
            chunk({}, "stop"),
        ],
        delay=0.1,  # each chunk its own read, and its own delta on the feed
    )
    events: list[dict[str, Any]] = []
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:

        async def scenario() -> None:
            ready = asyncio.Event()
            watch = asyncio.ensure_future(_watch(proxy.base, "sk-client-echo", events, ready))
            try:
                await asyncio.wait_for(ready.wait(), 5)
                upstream.script(split)
                async with httpx.AsyncClient(timeout=30) as client:
                    response = await client.post(
                        f"{proxy.url}/chat/completions",
                        headers={**CLIENT, "X-Conversation-Id": "echo-split"},
                        json={
                            "model": "m",
                            "stream": True,
                            "messages": [{"role": "user", "content": "hi"}],
                        },
                    )
                    assert response.status_code == 200
                for _ in range(100):
                    if any(e["type"] == "turn_end" for e in events):
                        break
                    await asyncio.sleep(0.05)
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

        asyncio.run(scenario())
    deltas = [e for e in events if e["type"] == "delta"]
    assert len(deltas) > 2, "the deltas came one read at a time"
    shown = {
        kind: "".join(e["text"] for e in deltas if e["kind"] == kind)
        for kind in ("reasoning", "content")
    }
    assert shown == {
        "reasoning": "Über den Schlüssel [REDACTED] – fertig.",
        "content": "Bearer [REDACTED] and sk-",
    }
    # what a held tail was waiting for comes before the turn's end
    assert events[-1]["type"] == "turn_end"
