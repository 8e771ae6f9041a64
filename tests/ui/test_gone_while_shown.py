"""A conversation deleted while a page shows it, in a real browser: deleted
through the API (or another page), it leaves every open page at once, with a
word on why; deleted where this page's feed cannot hear of it (another
replica on the same store), it leaves when the page next asks for it. An
armed Delete button stands down when the reader moves on; a delete that
cannot reach the proxy says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy
from tests.ui.conftest import ADMIN_TOKEN, Inspector

KEY = "key-deleted-elsewhere"


def answer(text: str) -> Json:
    return Json(
        {
            "id": "chatcmpl-del",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "reasoning_content": "r"},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def chat(proxy: ProxyServer, upstream: FakeUpstream, conversation: str) -> None:
    upstream.script(answer(f"Answer of {conversation}."))
    response = httpx.post(
        proxy.url + "/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Conversation-Id": conversation},
        json={"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]},
        timeout=20,
    )
    assert response.status_code == 200, response.text


def delete(proxy: ProxyServer, conversation: str) -> None:
    response = httpx.delete(
        f"{proxy.url}/conversations/{conversation}",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert response.status_code == 204, response.text


def expect_gone(page: Page, conversation: str, said: str) -> None:
    expect(page.locator(f'#conversations [data-conversation="{conversation}"]')).to_have_count(0)
    expect(page.locator("#conversation-title")).to_have_text("No conversation selected")
    expect(page.locator("#gone")).to_have_text(said)
    expect(page.locator("#gone")).to_be_visible()
    expect(page.locator("article.turn")).to_have_count(0)
    expect(page.locator("#context")).to_be_hidden()
    expect(page.locator("#delete")).to_be_hidden()


def test_a_conversation_deleted_through_the_api_leaves_every_open_page(
    inspector: Inspector, browser: Browser, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    chat(proxy, upstream, "kept-1")
    chat(proxy, upstream, "doomed-1")
    page = inspector.open(KEY).page
    expect(page.locator("#conversation-title")).to_have_text("doomed-1")
    expect(page.locator("article.turn .answer")).to_have_text("Answer of doomed-1.")

    admin_context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        admin_page = admin_context.new_page()
        admin_page.on("pageerror", lambda e: inspector.errors.append(str(e)))
        Inspector(admin_page, proxy, inspector.errors).open(ADMIN_TOKEN)
        admin_page.click('#conversations [data-conversation="doomed-1"]')
        expect(admin_page.locator("article.turn .answer")).to_have_text("Answer of doomed-1.")

        delete(proxy, "doomed-1")
        said = "Conversation doomed-1 was deleted."
        expect_gone(page, "doomed-1", said)
        expect_gone(admin_page, "doomed-1", said)
    finally:
        admin_context.close()
    inspector.shoot("30-deleted-elsewhere")

    # the other conversation is still there, and picking it clears the word
    page.click('#conversations [data-conversation="kept-1"]')
    expect(page.locator("article.turn .answer")).to_have_text("Answer of kept-1.")
    expect(page.locator("#gone")).to_be_hidden()


@pytest.fixture
def replicas(upstream: FakeUpstream, tmp_path: Path) -> Iterator[tuple[ProxyServer, ProxyServer]]:
    """Two proxies on one store, each with its own live feed."""
    config = route_config(upstream, top={"store": {"url": f"sqlite:///{tmp_path}/turns.db"}})
    with running_proxy(config) as one, running_proxy(config) as other:
        yield one, other


def test_a_conversation_deleted_on_another_replica_leaves_when_asked_for(
    browser: Browser, upstream: FakeUpstream, replicas: tuple[ProxyServer, ProxyServer]
) -> None:
    """Regression: the page showed the conversation's id, its old context
    tokens and "Pick a conversation on the left", and kept listing it."""
    one, other = replicas
    chat(one, upstream, "kept-2")
    chat(one, upstream, "doomed-2")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        Inspector(page, one, errors).open(KEY)
        page.click('#conversations [data-conversation="kept-2"]')
        expect(page.locator("article.turn .answer")).to_have_text("Answer of kept-2.")
        delete(other, "doomed-2")  # this page's feed does not hear of it
        expect(page.locator('#conversations [data-conversation="doomed-2"]')).to_have_count(1)
        page.click('#conversations [data-conversation="doomed-2"]')
        expect_gone(page, "doomed-2", "Conversation doomed-2 is no longer stored: it was deleted.")
        expect(page.locator("#error")).to_be_hidden()
    finally:
        page.close()
    assert errors == []


def test_an_armed_delete_stands_down_when_the_reader_moves_on(
    inspector: Inspector, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    chat(proxy, upstream, "armed-1")
    page = inspector.open(KEY).page
    page.click('#conversations [data-conversation="armed-1"]')
    delete_button = page.locator("#delete")
    expect(delete_button).to_be_visible()

    delete_button.focus()
    page.keyboard.press("Enter")
    expect(delete_button).to_have_text("Delete: sure?")
    page.keyboard.press("Escape")
    expect(delete_button).to_have_text("Delete")

    page.keyboard.press("Enter")
    expect(delete_button).to_have_text("Delete: sure?")
    page.keyboard.press("Tab")  # on to the turns: a later Enter there deletes nothing
    expect(delete_button).to_have_text("Delete")
    delete_button.click()
    expect(delete_button).to_have_text("Delete: sure?")
    delete_button.click()
    expect(page.locator('#conversations [data-conversation="armed-1"]')).to_have_count(0)

    # deleted from the keyboard, focus goes on from the list, not back to the top
    chat(proxy, upstream, "armed-2")
    page.click('#conversations [data-conversation="armed-2"]')
    expect(page.locator("article.turn .answer")).to_have_text("Answer of armed-2.")
    delete_button.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    expect(page.locator('#conversations [data-conversation="armed-2"]')).to_have_count(0)
    expect(page.locator("#conversations [aria-current='true']")).to_be_focused()


def test_a_delete_that_cannot_reach_the_proxy_says_so(
    browser: Browser, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    """Regression: when the DELETE request failed on the network, the
    confirming click threw an unhandled "Failed to fetch" and the page said
    nothing."""
    chat(proxy, upstream, "unreachable-1")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        Inspector(page, proxy, errors).open(KEY)
        page.click('#conversations [data-conversation="unreachable-1"]')
        expect(page.locator("article.turn .answer")).to_have_text("Answer of unreachable-1.")
        page.route(
            "**/v1/conversations/**",
            lambda route: route.abort() if route.request.method == "DELETE" else route.fallback(),
        )
        page.click("#delete")
        page.click("#delete")
        expect(page.locator("#error")).to_have_text(
            "The proxy could not be reached; nothing was deleted."
        )
        expect(page.locator('#conversations [data-conversation="unreachable-1"]')).to_have_count(1)
    finally:
        page.close()
    assert errors == []
