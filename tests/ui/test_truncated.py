"""The inspector marks a turn whose reasoning was cut at the storage bound
(`limits.max_reasoning_bytes`), as the conversation API says
(`reasoningTruncated`): live when the stream ends, and in scroll-back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy
from tests.ui.conftest import ADMIN_TOKEN, Client, Inspector, thinking_stream

LONG = " ".join(f"thought{n}" for n in range(400))  # about 4 KB, in one delta
BOUND = 1024


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    config = route_config(upstream_server, top={"limits": {"max_reasoning_bytes": BOUND}})
    with running_proxy(config, env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN_TOKEN}) as server:
        yield server


def test_a_truncated_turn_is_marked_live_and_in_scroll_back(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    client = Client(proxy, "key-truncated")
    inspector.open("key-truncated")
    page = inspector.page
    upstream.script(thinking_stream(("reasoning", LONG), ("content", "Done.")))
    assert client.chat("cut-1").status_code == 200
    [turn] = client.conversation("cut-1")["turns"]
    assert turn["reasoningTruncated"] is True
    assert len(turn["blocks"][0]["thought"]) == BOUND
    badge = page.locator('article.turn [data-badge="truncated"]')
    expect(badge).to_have_count(1)
    expect(badge).to_have_text("reasoning truncated")
    expect(badge).to_have_attribute(
        "title",
        "The reasoning was longer than limits.max_reasoning_bytes: it is stored up to that bound.",
    )

    upstream.script(thinking_stream(("reasoning", "short"), ("content", "Fine.")))
    assert client.chat("cut-2").status_code == 200
    assert client.conversation("cut-2")["turns"][0]["reasoningTruncated"] is False
    page.reload()
    page.wait_for_selector('#live-status[data-state="live"]')
    page.locator("#conversations").get_by_text("cut-1").first.click()
    expect(
        page.locator('article.turn[data-state="stored"] [data-badge="truncated"]')
    ).to_have_count(1)
    page.locator("#conversations").get_by_text("cut-2").first.click()
    expect(page.locator('article.turn[data-state="stored"]')).to_have_count(1)
    expect(page.locator('[data-badge="truncated"]')).to_have_count(0)
    inspector.shoot("20-reasoning-truncated")
    client.pool.shutdown(wait=True)
