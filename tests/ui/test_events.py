"""GET /ui and GET /ui/events over HTTP: the static files and their policy,
the live feed as server-sent events, scoped to the caller, with keep-alives,
and no subscription left behind when the client goes away."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from proxy.api.ui import ui_router
from proxy.config import build_config
from proxy.live import LiveFeed
from proxy.runtime import Runtime
from tests.harness import FakeUpstream, ProxyServer, free_port, route_config, running_proxy
from tests.ui.conftest import ADMIN_TOKEN, Client, thinking_stream


def test_page_and_files_are_served_with_a_strict_policy(proxy: ProxyServer) -> None:
    page = httpx.get(proxy.base + "/ui")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert 'src="ui/app.js"' in page.text
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        response = httpx.get(f"{proxy.base}/ui/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
        assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/ui/nothing.js", "/ui/..%2Fapp.py", "/ui/%2E%2E"])
def test_only_the_pages_own_files_are_served(proxy: ProxyServer, path: str) -> None:
    response = httpx.get(proxy.base + path)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_the_page_loads_nothing_from_elsewhere(proxy: ProxyServer) -> None:
    for name in ("", "/app.js", "/style.css"):
        text = httpx.get(f"{proxy.base}/ui{name}").text
        assert "http://" not in text
        assert "https://" not in text


def _data_events(chunk: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in chunk.split("\n") if line.startswith("data: ")]


async def _watch(
    base: str, key: str | None, events: list[dict[str, Any]], ready: asyncio.Event
) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client,
        client.stream("GET", base + "/ui/events", headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "hello":
                    ready.set()


def test_each_caller_sees_only_its_own_tenants_turns(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    viewers = {
        "alice": "key-events-alice",
        "bob": "key-events-bob",
        "admin": ADMIN_TOKEN,
        "anon": None,
    }
    seen: dict[str, list[dict[str, Any]]] = {name: [] for name in viewers}

    async def scenario() -> None:
        readies = {name: asyncio.Event() for name in viewers}
        tasks = [
            asyncio.ensure_future(_watch(proxy.base, key, seen[name], readies[name]))
            for name, key in viewers.items()
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies.values())), 5)
            upstream.script(
                thinking_stream(("reasoning", "Let me think."), ("content", "Hi."), delay=0.02)
            )
            response = await asyncio.to_thread(
                Client(proxy, "key-events-alice").chat, "events-scoping"
            )
            assert response.status_code == 200
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                done = [
                    n for n in ("alice", "admin") if any(e["type"] == "turn_end" for e in seen[n])
                ]
                if len(done) == 2:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # time for a wrongly routed event to arrive
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    # the hello: the caller's scope, and how long a silent live turn may last
    # (the default upstream idle timeout, 300 s, plus 5)
    stale = 305.0
    assert seen["admin"][0] == {"type": "hello", "scope": "all", "staleAfter": stale}
    assert seen["alice"][0] == {"type": "hello", "scope": "tenant", "staleAfter": stale}
    assert seen["bob"] == [{"type": "hello", "scope": "tenant", "staleAfter": stale}]
    assert seen["anon"] == [{"type": "hello", "scope": "tenant", "staleAfter": stale}]
    alice = seen["alice"][1:]
    assert [e["type"] for e in alice] == ["turn_start", "delta", "delta", "turn_end"]
    # the admin sees the same events, each naming its tenant (alice's own feed does not)
    admin = seen["admin"][1:]
    assert all("tenant" not in e for e in alice)
    assert len({e["tenant"] for e in admin}) == 1
    assert alice == [{k: v for k, v in e.items() if k != "tenant"} for e in admin]
    start, thought, answer, end = alice
    assert start["conversation"] == "events-scoping"
    assert set(start["context"]) == {"effective", "raw"}
    assert (thought["kind"], thought["text"]) == ("reasoning", "Let me think.")
    assert (answer["kind"], answer["text"]) == ("content", "Hi.")
    assert end["complete"] is True
    assert end["persisted"] is True
    assert end["finishReason"] == "stop"
    assert len({e["turnId"] for e in alice}) == 1


def test_leaving_ends_the_subscription_at_once(proxy: ProxyServer) -> None:
    feed = proxy.runtime.live
    with httpx.stream("GET", proxy.base + "/ui/events", timeout=5) as response:
        # keep the iterator: dropping it closes the connection at once
        chunks = response.iter_text()
        assert [(e["type"], e["scope"]) for e in _data_events(next(chunks))] == [
            ("hello", "tenant")
        ]
        assert feed.active
    deadline = time.monotonic() + 3
    while feed.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not feed.active, "the subscription outlived its client"


@contextmanager
def _serve(app: FastAPI) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_an_idle_stream_sends_keepalive_comments(upstream: FakeUpstream) -> None:
    runtime = Runtime(build_config(route_config(upstream), env={}))
    feed: LiveFeed = runtime.live
    api = FastAPI()
    api.include_router(ui_router(runtime, keepalive=0.05))
    with _serve(api) as base:
        received = b""
        with httpx.stream("GET", base + "/ui/events", timeout=5) as response:
            for data in response.iter_raw():
                received += data
                if received.count(b": keep-alive\n\n") >= 2:
                    break
        assert received.startswith(b": live feed\n\ndata: ")
        deadline = time.monotonic() + 3
        while feed.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not feed.active


def test_events_need_a_key_where_the_proxy_requires_one(upstream: FakeUpstream) -> None:
    config = route_config(upstream, top={"server": {"require_auth": True}})
    with running_proxy(config) as server:
        response = httpx.get(server.base + "/ui/events", timeout=5)
        assert response.status_code == 401
        assert response.json()["error"]["type"]
        page = httpx.get(server.base + "/ui", timeout=5)
        assert page.status_code == 200  # the page itself is public; its data is not
