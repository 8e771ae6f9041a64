"""On the admin's page, two tenants' conversations of the same id stay
apart: a live turn of one tenant's conversation is drawn in that
conversation, never under the other tenant's of the same id, and only that
conversation is marked as streaming."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from tests.harness import FakeUpstream, Json, ProxyServer
from tests.ui.conftest import ADMIN_TOKEN, Client, Inspector, thinking_stream

SHARED = "shared-id"


def test_a_live_turn_stays_in_its_own_tenants_conversation(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    first = Client(proxy, "key-first-tenant")
    second = Client(proxy, "key-second-tenant")
    upstream.script(
        Json(
            {
                "id": "chatcmpl-ui",
                "object": "chat.completion",
                "created": 1,
                "model": "fake-model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "First tenant's answer."},
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    assert first.chat(SHARED, stream=False).status_code == 200

    page = inspector.open(ADMIN_TOKEN).page
    items = page.locator(f"#conversations [data-conversation={SHARED}]")
    expect(items).to_have_count(1)
    expect(page.locator("article.turn .answer")).to_have_text(["First tenant's answer."])
    first_ref = items.first.get_attribute("data-ref")

    upstream.script(
        thinking_stream(
            *[("reasoning", f"Second tenant thinks, step {n}. ") for n in range(25)],
            ("content", "Second tenant's answer."),
        )
    )
    pending = second.chat_later(SHARED)
    # while it streams: the page follows it into the second tenant's conversation
    live = page.locator('article.turn[data-state="live"]')
    expect(live).to_have_count(1)
    expect(items).to_have_count(2)
    current = page.locator('#conversations [aria-current="true"]')
    expect(current).to_have_count(1)
    assert current.get_attribute("data-ref") != first_ref
    expect(page.locator("article.turn .answer", has_text="First tenant's answer.")).to_have_count(0)
    expect(page.locator('#conversations [data-live="true"]')).to_have_count(1)
    # a reload of the list mid-stream (nothing of it stored yet) keeps it apart too
    second_ref = current.get_attribute("data-ref") or ""
    page.click("#refresh")
    time.sleep(0.3)
    expect(items).to_have_count(2)
    expect(current).to_have_attribute("data-ref", second_ref)
    expect(page.locator('article.turn[data-state="live"]')).to_have_count(1)
    page.locator(f'#conversations [data-ref="{first_ref}"]').click()
    expect(page.locator('#conversations [aria-current="true"]')).to_have_attribute(
        "data-ref", first_ref or ""
    )
    # the first tenant's conversation shows its own turn only, the stream going on
    time.sleep(0.3)
    expect(page.locator('article.turn[data-state="live"]')).to_have_count(0)
    expect(page.locator("article.turn .answer")).to_have_text(["First tenant's answer."])
    assert pending.result(20).status_code == 200
    expect(page.locator("article.turn .answer")).to_have_text(["First tenant's answer."])
    expect(page.locator('#conversations [data-live="true"]')).to_have_count(0)

    # and the second tenant's shows its own
    page.locator(f'#conversations [data-ref="{second_ref}"]').click()
    expect(page.locator('article.turn[data-state="stored"] .answer')).to_have_text(
        ["Second tenant's answer."]
    )
    for client in (first, second):
        client.pool.shutdown(wait=True)
