"""The inspector's live view of a proxy that started before its Redis, with
no REASONING_PROXY_SECRET: until Redis gives the secret it keeps, the
process uses one drawn for the run, and its live feed (a channel named
after the secret, tenants that are hashes under it) is replaced once Redis
answers. A page that was watching the old feed must not be left on it,
silent for good: its stream ends, and the page, connecting again as it
does, sees the streams that follow."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer, wait_until
from tests.stores.test_durability_sqlite import AUTH, _answer, _content, _stream


class Viewer:
    """One connection to /ui/events, read in a thread, as the page reads it."""

    def __init__(self, base: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(base,), daemon=True)
        self._thread.start()

    def _read(self, base: str) -> None:
        timeout = httpx.Timeout(30, read=None)
        try:
            with httpx.stream("GET", base + "/ui/events", headers=AUTH, timeout=timeout) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(orjson.loads(line[6:]))
        except httpx.HTTPError:
            pass
        self.ended.set()

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


def test_a_page_watching_before_redis_answered_is_moved_to_the_new_feed(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    server = RedisServer(tmp_path / "redis")  # its port, nobody listening yet
    args = ["--upstream", upstream.url, "--store", server.url]
    env = {"REASONING_PROXY_SECRET": ""}
    try:
        with ProxyProcess(args, log=tmp_path / "proxy.log", env=env) as proxy:
            assert httpx.get(proxy.base + "/readyz", timeout=10).json()["secret"] == "pending"
            early = Viewer(proxy.base)
            wait_until(lambda: "hello" in early.types(), what="the first viewer's hello")

            server.start()
            wait_until(
                lambda: httpx.get(proxy.base + "/readyz", timeout=10).status_code == 200,
                what="the proxy to take the secret Redis keeps",
            )
            # the old feed's viewer is let go, so its page connects again
            assert early.ended.wait(10), "the viewer of the replaced feed was left on it"

            again = Viewer(proxy.base)
            wait_until(lambda: "hello" in again.types(), what="the second viewer's hello")
            upstream.script(_answer("seen"))
            assert _stream(proxy.base, "watched") == (_content("seen"), True)
            wait_until(
                lambda: any(
                    e["type"] == "turn_end" and e["conversation"] == "watched" and e["persisted"]
                    for e in again.events
                ),
                what="the stream on the live view",
            )
            assert "Traceback" not in proxy.log.read_text()
    finally:
        server.stop()
