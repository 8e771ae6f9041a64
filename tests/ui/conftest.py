"""Fixtures for the inspector tests: one headless Chromium for the session,
a fresh browser context and page per test, the real proxy (on a real socket)
in front of the fake upstream, and screenshots under test-artifacts/ui/."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests import casefiles
from tests.harness import FakeUpstream, ProxyServer, Stream, route_config, running_proxy

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
ADMIN_TOKEN = "admin-token-for-the-inspector-tests"
CHROMIUM = "/usr/bin/chromium"
# Playwright's own browser download is not used: the system Chromium is.
REBOUND = "rebound.example"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # a web page's name that its owner pointed at 127.0.0.1 (DNS rebinding)
    f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
]
STEP = 0.12  # seconds between upstream events: slow enough to watch a stream


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return casefiles.chunk(delta, finish, model="fake-model", id="chatcmpl-ui")


def thinking_stream(*parts: tuple[str, str], delay: float = STEP) -> Stream:
    """An upstream stream of (kind, text) parts, kind `reasoning` (sent as
    `reasoning_content`) or `content`, then a stop."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    for kind, text in parts:
        field_name = "reasoning_content" if kind == "reasoning" else "content"
        chunks.append(chunk({field_name: text}))
    chunks.append(chunk({}, "stop"))
    return Stream(chunks, delay=delay)


def token_estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def preview_of(text: str) -> str:
    flat = " ".join(text.split())
    return '"' + (flat[:40].rstrip() + "…" if len(flat) > 40 else flat) + '"'


@dataclass
class Client:
    """Chat completions through the proxy, as a tenant (a key, or none)."""

    proxy: ProxyServer
    key: str | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return {**headers, **(extra or {})}

    def chat(
        self,
        conversation: str,
        *,
        stream: bool = True,
        headers: dict[str, str] | None = None,
        question: str = "Why is the sky blue?",
    ) -> httpx.Response:
        body = {
            "model": "fake-model",
            "stream": stream,
            "messages": [{"role": "user", "content": question}],
        }
        return httpx.post(
            self.proxy.url + "/chat/completions",
            json=body,
            headers=self.headers({"X-Conversation-Id": conversation, **(headers or {})}),
            timeout=20,
        )

    def chat_later(self, conversation: str, **kwargs: Any) -> Future[httpx.Response]:
        return self.pool.submit(self.chat, conversation, **kwargs)

    def conversation(self, conversation: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.proxy.url}/conversations/{conversation}", headers=self.headers(), timeout=10
        )
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


@dataclass
class Inspector:
    """The page under test, opened on the proxy's /ui."""

    page: Page
    proxy: ProxyServer
    errors: list[str]

    def open(self, key: str | None = None) -> Inspector:
        self.page.goto(self.proxy.base + "/ui")
        if key is not None:
            self.page.fill("#key", key)
            self.page.click("#key-form button[type=submit]")
        self.page.wait_for_selector('#live-status[data-state="live"]')
        return self

    def shoot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


# Package scope: Playwright's sync API holds an event loop on the main thread
# while it runs, so it must end with this package, before any test that runs
# its own loop (asyncio.run) can come after it.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.skip("the inspector tests need Chromium at /usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    config = route_config(upstream_server)
    with running_proxy(config, env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN_TOKEN}) as server:
        yield server


@pytest.fixture
def inspector(browser: Browser, proxy: ProxyServer, upstream: FakeUpstream) -> Iterator[Inspector]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield Inspector(page, proxy, errors)
    finally:
        page.close()
        context.close()
    assert errors == [], "the page logged errors"
    # the page's live feed ends with the page: no subscription is left behind
    deadline = time.monotonic() + 3
    while proxy.runtime.live.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not proxy.runtime.live.active, "a closed page still holds a live subscription"


@pytest.fixture
def client_factory(proxy: ProxyServer) -> Iterator[Callable[[str | None], Client]]:
    clients: list[Client] = []

    def make(key: str | None) -> Client:
        client = Client(proxy, key)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.pool.shutdown(wait=True)
