"""The inspector marks a turn whose answer came in chat's `refusal` field,
as the conversation API says (`refusal`): once the turn is stored, and
in scroll-back."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.harness import FakeUpstream, ProxyServer, Stream
from tests.ui.conftest import Client, Inspector, chunk, thinking_stream

REFUSAL = "I can't help with that."


def refused() -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "content": None, "refusal": ""}),
            chunk({"refusal": "I can't "}),
            chunk({"refusal": "help with that."}),
            chunk({}, "stop"),
        ]
    )


def test_a_refused_turn_is_marked_live_and_in_scroll_back(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    client = Client(proxy, "key-refusal")
    inspector.open("key-refusal")
    page = inspector.page
    upstream.script(refused())
    assert client.chat("refused-1").status_code == 200
    [turn] = client.conversation("refused-1")["turns"]
    assert (turn["content"], turn["refusal"]) == (REFUSAL, True)
    badge = page.locator('article.turn [data-badge="refusal"]')
    expect(badge).to_have_count(1)
    expect(badge).to_have_text("refusal")

    upstream.script(thinking_stream(("content", "Fine.")))
    assert client.chat("answered-1").status_code == 200
    page.reload()
    page.wait_for_selector('#live-status[data-state="live"]')
    page.locator("#conversations").get_by_text("refused-1").first.click()
    expect(page.locator('article.turn[data-state="stored"] [data-badge="refusal"]')).to_have_count(
        1
    )
    page.locator("#conversations").get_by_text("answered-1").first.click()
    expect(page.locator('article.turn[data-state="stored"]')).to_have_count(1)
    expect(page.locator('[data-badge="refusal"]')).to_have_count(0)
    client.pool.shutdown(wait=True)
