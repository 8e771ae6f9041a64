"""The input of a turn made through a route whose upstream speaks the door's
own API (`api: messages`, `api: responses`), with `ui.show_prompts`, in a
real browser: the user's message and the tool results show above the turn,
as they do through a chat route."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.test_responses_native import BASE, message

KEY = "key-native-input"
TOOL_USE = {
    "id": "msg_tool",
    "type": "message",
    "role": "assistant",
    "model": "claude-up",
    "content": [
        {"type": "thinking", "thinking": "Ask the tool.", "signature": "sig-t"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 20, "output_tokens": 9},
}
DONE = {
    **TOOL_USE,
    "id": "msg_done",
    "content": [{"type": "text", "text": "Cold."}],
    "stop_reason": "end_turn",
}


def messages_loop(base: str, upstream: FakeUpstream) -> None:
    upstream.script(Json(TOOL_USE), Json(DONE))
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "X-Conversation-Id": "native-input",
    }
    history: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    for _ in range(2):
        response = httpx.post(
            base + "/messages",
            headers=headers,
            json={"model": "claude", "max_tokens": 64, "messages": history},
            timeout=20,
        )
        assert response.status_code == 200, response.text
        history += [
            {"role": "assistant", "content": response.json()["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "-3 °C, snow"}],
                    }
                ],
            },
        ]


def responses_loop(base: str, upstream: FakeUpstream) -> None:
    upstream.script(Json({**BASE, "status": "completed", "output": [message("Cold.")]}))
    items = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "-3 °C, snow"},
    ]
    response = httpx.post(
        base + "/responses",
        headers={"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "native-input"},
        json={"model": "m", "input": items},
        timeout=20,
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_native_routes_turn_shows_its_input(
    browser: Browser, upstream: FakeUpstream, api: str
) -> None:
    """Regression: the input was read from the body sent upstream, the
    door's own shape, so a Messages route stored a blank user message in
    place of its tool results and a Responses route stored none."""
    config = route_config(upstream, api=api, top={"ui": {"show_prompts": True}})
    with running_proxy(config) as proxy:
        (messages_loop if api == "messages" else responses_loop)(proxy.url, upstream)
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(proxy.base + "/ui")
            page.fill("#key", KEY)
            page.click("#key-form button[type=submit]")
            turns = page.locator('article.turn[data-state="stored"]')
            last = turns.last
            expect(last.locator(".answer")).to_have_text("Cold.")
            result = last.locator(".input.tool-result")
            expect(result.locator(".input-label")).to_have_text("Tool result · toolu_1")
            expect(result.locator(".input-text")).to_have_text("-3 °C, snow")
            expect(last.locator('.input[data-role="user"]')).to_have_count(0)
            if api == "messages":
                expect(turns).to_have_count(2)
                first = turns.first.locator('.input[data-role="user"] .input-text')
                expect(first).to_have_text("Weather in Oslo?")
        finally:
            page.close()
    assert errors == []
