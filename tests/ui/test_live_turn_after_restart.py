"""A live turn whose end the page could not hear, in a real browser: the
proxy (`serve` with a SQLite store) stops while a stream is on screen and
starts again; the page connects again and shows the turn as the store kept
it, not as a stream that never ends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from playwright.sync_api import Browser, expect

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess
from tests.ui.conftest import thinking_stream


def test_a_stream_cut_by_a_restart_stops_streaming_on_the_page(
    browser: Browser, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Regression: the turn_end of a stream the proxy cut on its way down
    never reached the page, which kept that turn "streaming" beside the
    stored (incomplete) one until it was reloaded."""
    parts = [("reasoning", f"step {n}. ") for n in range(100)]
    upstream.script(thinking_stream(*parts, ("content", "Done."), delay=0.05))
    store = f"sqlite:///{tmp_path / 'inspector.db'}"
    proxy = ProxyProcess(["--upstream", upstream.url, "--store", store], log=tmp_path / "proxy.log")
    page = browser.new_page()
    pool = ThreadPoolExecutor(1)
    try:
        proxy.start()
        page.goto(proxy.base + "/ui")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        body = {
            "model": "fake-model",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        answer = pool.submit(
            httpx.post,
            proxy.url + "/chat/completions",
            json=body,
            headers={"X-Conversation-Id": "cut-by-restart"},
            timeout=30,
        )
        live = page.locator('article.turn[data-state="live"]')
        expect(live.locator("[data-ai-reasoning]")).to_contain_text("step 2.")
        proxy.stop()  # SIGTERM: the proxy lets the stream finish, stores it, and exits
        assert answer.result(30).status_code == 200
        expect(page.locator("#live-status")).not_to_have_attribute("data-state", "live")
        proxy.start()  # the same port and store
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=15_000)
        stored = page.locator('article.turn[data-state="stored"]')
        expect(stored).to_have_count(1)
        expect(stored.locator(".answer")).to_have_text("Done.")
        expect(live).to_have_count(0)
        expect(page.locator(".badge.live")).to_have_count(0)
        item = page.locator('[data-conversation="cut-by-restart"]')
        expect(item).to_have_attribute("data-live", "false")
    finally:
        page.close()
        proxy.stop()
        pool.shutdown(wait=True)
