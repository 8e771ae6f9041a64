"""A stored turn whose answer came in chat's `refusal` field says so
(`refusal: true` in the conversations API), through every door, streamed
and whole; an answer says `refusal: false`. The mark survives a SQLite
store across a restart; the live feed's `turn_end` says it too. The real
proxy and each door's own SDK."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_refusals import DOORS, KEY, REFUSAL, THOUGHT, ask, refusal_answer
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.ui.test_events import _watch

ADMIN = "admin-token-for-refusals"


def config(upstream: FakeUpstream, tmp_path: Path) -> dict[str, Any]:
    store = {"url": f"sqlite:///{tmp_path}/turns.db"}
    return route_config(upstream, top={"server": {"admin_token": ADMIN}, "store": store})


def stored(proxy: ProxyServer, conversation: str) -> list[Any]:
    """The conversation's turns, read with the admin token."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    listed = httpx.get(f"{proxy.url}/conversations", headers=admin).json()["data"]
    (tenant,) = {c["tenant"] for c in listed if c["id"] == conversation}
    response = httpx.get(
        f"{proxy.url}/conversations/{conversation}", params={"tenant": tenant}, headers=admin
    )
    assert response.status_code == 200, response.text
    turns: list[Any] = response.json()["turns"]
    return turns


def answer(stream: bool) -> Stream | Json:
    """The same exchange answered, not refused."""
    if stream:
        return Stream(
            [
                {"choices": [{"index": 0, "delta": {"reasoning_content": THOUGHT}}]},
                {"choices": [{"index": 0, "delta": {"content": "Done."}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
        )
    message = {"role": "assistant", "content": "Done.", "reasoning_content": THOUGHT}
    return Json(
        {
            "id": "chatcmpl-a",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("door", DOORS)
def test_a_refused_turn_is_marked_as_one(
    upstream: FakeUpstream, tmp_path: Path, door: str, stream: bool
) -> None:
    refused, answered = f"refused-{door}-{stream}", f"answered-{door}-{stream}"
    with running_proxy(config(upstream, tmp_path)) as proxy:
        upstream.script(refusal_answer(stream, reasoning=THOUGHT))
        ask(proxy, door, stream, refused)
        upstream.script(answer(stream))
        ask(proxy, door, stream, answered)
        (turn,) = stored(proxy, refused)
        (other,) = stored(proxy, answered)
    assert (turn["content"], turn["finishReason"], turn["refusal"]) == (REFUSAL, "stop", True)
    assert (other["content"], other["refusal"]) == ("Done.", False)
    with running_proxy(config(upstream, tmp_path)) as proxy:  # read back from the store
        assert [t["refusal"] for t in stored(proxy, refused)] == [True]
        assert [t["refusal"] for t in stored(proxy, answered)] == [False]


def test_the_tenant_sees_the_mark_too(upstream: FakeUpstream, tmp_path: Path) -> None:
    with running_proxy(config(upstream, tmp_path)) as proxy:
        upstream.script(refusal_answer(True))
        ask(proxy, "chat", True, "refused-own")
        own = httpx.get(
            f"{proxy.url}/conversations/refused-own", headers={"Authorization": f"Bearer {KEY}"}
        )
    assert own.json()["turns"][0]["refusal"] is True


def test_the_live_feed_says_the_turn_was_a_refusal(upstream: FakeUpstream, tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    with running_proxy(config(upstream, tmp_path)) as proxy:

        async def scenario() -> None:
            ready = asyncio.Event()
            task = asyncio.ensure_future(_watch(proxy.base, KEY, seen, ready))
            try:
                await asyncio.wait_for(ready.wait(), 5)
                upstream.script(refusal_answer(True))
                await asyncio.to_thread(ask, proxy, "chat", True, "refused-live")
                upstream.script(answer(True))
                await asyncio.to_thread(ask, proxy, "chat", True, "answered-live")
                deadline = time.monotonic() + 5
                while sum(e["type"] == "turn_end" for e in seen) < 2:
                    assert time.monotonic() < deadline, seen
                    await asyncio.sleep(0.02)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        asyncio.run(scenario())
    ends = [e for e in seen if e["type"] == "turn_end"]
    assert [(e["conversation"], e["refusal"]) for e in ends] == [
        ("refused-live", True),
        ("answered-live", False),
    ]
