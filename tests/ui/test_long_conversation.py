"""A conversation of 200 turns, in a real browser: each turn's "Sent upstream"
fold tells of every earlier assistant message (199 on the last turn), the
latest 50 by a note each and the earlier ones counted; the notes are drawn
when a fold is opened, and the page stays a few thousand elements, not tens
of thousands redrawn on every turn."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import expect

from tests.harness import FakeUpstream, Json
from tests.ui.conftest import Inspector

KEY = "key-two-hundred-turns"
TURNS = 200
KEPT = 50  # the notes a stored turn keeps one by one (MAX_STORED_NOTES)


def answer(n: int) -> Json:
    message = {"role": "assistant", "content": f"Answer {n}.", "reasoning_content": f"Thought {n}."}
    return Json(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def test_two_hundred_turns_draw_the_upstream_notes_on_demand(
    inspector: Inspector, upstream: FakeUpstream
) -> None:
    """Regression: every fold's notes were drawn with the page, 19,900 list
    items and some 64,000 elements for 200 turns, rebuilt on each refresh
    and each turn's end (a 1,000-turn conversation: half a million)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Question 0"}]
    headers = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "two-hundred"}
    with httpx.Client(timeout=20) as http:
        for n in range(TURNS):
            upstream.script(answer(n))
            response = http.post(
                inspector.proxy.url + "/chat/completions",
                json={"model": "fake-model", "messages": messages},
                headers=headers,
            )
            assert response.status_code == 200, response.text
            messages.append({"role": "assistant", "content": f"Answer {n}."})
            messages.append({"role": "user", "content": f"Question {n + 1}"})
    page = inspector.open(KEY).page
    turns = page.locator('article.turn[data-state="stored"]')
    expect(turns).to_have_count(TURNS, timeout=20_000)
    last = turns.last
    expect(last.locator(".egress summary")).to_have_text(
        f"Sent upstream: {TURNS - 1} stripped (openai)"
    )
    assert page.locator(".egress li").count() == 0
    assert page.evaluate("document.getElementsByTagName('*').length") < 10_000
    last.locator(".egress summary").click()
    notes = last.locator(".egress li")
    expect(notes).to_have_count(KEPT + 1)
    earlier = TURNS - 1 - KEPT
    expect(notes.first).to_have_text(f"{earlier} earlier assistant messages: {earlier} stripped")
    # the first noted: assistant message number earlier + 1, at position 2 x earlier + 1
    expect(notes.nth(1).locator(".egress-action")).to_have_text(
        f"Message {2 * earlier + 2}: stripped"
    )
    last.locator(".egress summary").click()  # closed and opened again: drawn once
    last.locator(".egress summary").click()
    expect(notes).to_have_count(KEPT + 1)
    expect(last.locator(".egress-settings")).to_be_visible()
