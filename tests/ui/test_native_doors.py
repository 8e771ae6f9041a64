"""Turns through a route whose upstream speaks the door's own API (`api:
messages`), in a real browser: the page learns of them from the live feed
and shows them from the store, streamed or whole."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.test_messages_native import anthropic_stream
from tests.harness import FakeUpstream, Json, route_config, running_proxy

WHOLE = {
    "id": "msg_whole",
    "type": "message",
    "role": "assistant",
    "model": "claude-up",
    "content": [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig-w"},
        {"type": "text", "text": "Hello."},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 20, "output_tokens": 9},
}


@pytest.mark.parametrize("stream", [True, False])
def test_a_messages_route_turn_appears_without_a_refresh(
    browser: Browser, upstream: FakeUpstream, stream: bool
) -> None:
    """Regression: the native doors told the live feed nothing, so the page
    showed their turns only after a click on Refresh."""
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        page = browser.new_page()
        try:
            page.goto(proxy.base + "/ui")
            page.fill("#key", "key-native")
            page.click("#key-form button[type=submit]")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            expect(page.locator("#no-conversations")).to_be_visible()
            upstream.script(anthropic_stream() if stream else Json(WHOLE))
            response = httpx.post(
                proxy.url + "/messages",
                headers={
                    "x-api-key": "key-native",
                    "anthropic-version": "2023-06-01",
                    "X-Conversation-Id": "native-1",
                },
                json={
                    "model": "claude",
                    "max_tokens": 64,
                    "stream": stream,
                    "messages": [{"role": "user", "content": "Hi."}],
                },
                timeout=20,
            )
            assert response.status_code == 200
            expect(page.locator('#conversations [data-conversation="native-1"]')).to_have_count(1)
            turn = page.locator('article.turn[data-state="stored"]')
            expect(turn.locator(".answer")).to_have_text("Hello.")
            block = turn.locator("[data-ai-reasoning]")
            expect(block).to_have_attribute("data-collapsed", "true")
            expect(block.locator(".preview")).to_have_text('"Let me think."')
            expect(page.locator('article.turn[data-state="live"]')).to_have_count(0)
        finally:
            page.close()
