"""A live turn whose replica died mid-stream, in a real browser: two
proxies share one Redis; the page watches replica B while replica A streams;
A is killed (SIGKILL: no turn_end ever comes). Past the longest upstream
idle timeout (a live proxy ends a stream that idle itself) the page takes
the turn for ended and shows what the store holds, not "streaming" for
good."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from playwright.sync_api import Browser, expect

from proxy.live_redis import CENSUS_SECONDS
from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer
from tests.ui.conftest import thinking_stream

IDLE = 2  # seconds: the route's upstream idle timeout


def test_a_dead_replicas_stream_stops_streaming_on_the_page(
    browser: Browser, upstream: FakeUpstream, redis_server: RedisServer, tmp_path: Path
) -> None:
    parts = [("reasoning", f"step {n}. ") for n in range(400)]
    upstream.script(thinking_stream(*parts, ("content", "Done."), delay=0.05))
    config = tmp_path / "proxy.yaml"
    route = {"name": "main", "models": ["*"], "upstream": upstream.url, "timeouts": {"idle": IDLE}}
    config.write_text(json.dumps({"routes": [route], "store": {"url": redis_server.url}}))
    a = ProxyProcess(["--config", str(config)], log=tmp_path / "a.log")
    b = ProxyProcess(["--config", str(config)], log=tmp_path / "b.log")
    page = browser.new_page()
    pool = ThreadPoolExecutor(1)
    try:
        a.start()
        b.start()
        page.goto(b.base + "/ui")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        time.sleep(3 * CENSUS_SECONDS)  # A learns that B has a viewer at its next census
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        answer = pool.submit(
            httpx.post,
            a.url + "/chat/completions",
            json=body,
            headers={"X-Conversation-Id": "dead-replica"},
            timeout=60,
        )
        live = page.locator('article.turn[data-state="live"]')
        expect(live.locator("[data-ai-reasoning]")).to_contain_text("step 2.")
        a.signal(signal.SIGKILL)
        a.wait()
        # the page hears nothing more of that turn; past IDLE + 5 s it is gone
        expect(live).to_have_count(0, timeout=20_000)
        expect(page.locator(".badge.live")).to_have_count(0)
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        assert answer.exception(30) is not None  # the client saw its proxy die
    finally:
        page.close()
        a.stop()
        b.stop()
        pool.shutdown(wait=True)
