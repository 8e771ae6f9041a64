"""Text from models and clients in the inspector, in a real browser: markup
in answers, reasoning, model names, tool names, arguments and ids, finish
reasons and the user's input stays text, live and stored; and bidi controls
in a name cannot reorder the text beside it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests import casefiles
from tests.harness import FakeUpstream, ProxyServer, Stream, route_config, running_proxy
from tests.ui.conftest import ADMIN_TOKEN, Client, Inspector
from tests.ui.test_exchange_view import no_sideways_scroll

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE, never closed


def hostile(where: str) -> str:
    """Markup that runs script if it is ever parsed as HTML, then tricks."""
    mark = f"window.pwned = [...(window.pwned || []), '{where}']"
    return (
        f'<img src=x onerror="{mark}"><svg onload="{mark}"></svg>'
        f"</script><script>{mark}</script> javascript:{mark} 思考🙂"
    )


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    config = route_config(upstream_server, top={"ui": {"show_prompts": True}})
    with running_proxy(config, env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN_TOKEN}) as server:
        yield server


def tool_stream(model: str, reasoning: str, answer: str, call: dict[str, Any]) -> Stream:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return casefiles.chunk(delta, finish, model=model, id="chatcmpl-hostile")

    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": reasoning}),
            chunk({"content": answer}),
            chunk({"tool_calls": [{"index": 0, "type": "function", **call}]}),
            chunk({}, hostile("finish")),
        ],
        delay=0.05,
    )


def left_to_right(page: Page, selector: str, text: str) -> bool:
    """Whether `text`, inside the element, is laid out left to right (its
    first character left of its last), as it is written."""
    return bool(
        page.eval_on_selector(
            selector,
            """(root, text) => {
              const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
              for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const at = node.data.indexOf(text);
                if (at < 0) continue;
                const box = (i) => {
                  const range = document.createRange();
                  range.setStart(node, i);
                  range.setEnd(node, i + 1);
                  return range.getBoundingClientRect();
                };
                return box(at).left < box(at + text.length - 1).left;
              }
              throw new Error(`no text ${text}`);
            }""",
            text,
        )
    )


def test_markup_from_models_and_clients_stays_text(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    client = Client(proxy, "key-hostile")
    call = {
        "id": hostile("tool-id"),
        "function": {"name": hostile("tool-name"), "arguments": json.dumps({"q": hostile("args")})},
    }
    page = inspector.open("key-hostile").page
    stream = tool_stream(hostile("model"), hostile("reasoning"), hostile("answer"), call)
    stream.gate_after = 1  # held after the reasoning, until the live turn was read
    upstream.script(stream)
    body = {
        "model": hostile("request-model"),
        "stream": True,
        "messages": [{"role": "user", "content": hostile("input")}],
    }
    reply = client.pool.submit(
        lambda: httpx.post(
            proxy.url + "/chat/completions",
            json=body,
            headers=client.headers({"X-Conversation-Id": "hostile-1"}),
            timeout=20,
        )
    )
    # live: the model's name and the reasoning as they stream
    live = page.locator('article.turn[data-state="live"]')
    try:
        expect(live.locator("[data-ai-reasoning]")).to_contain_text("onerror", timeout=10_000)
        expect(live.locator(".model")).to_have_text(hostile("request-model"))
    finally:
        stream.gate.set()
    assert reply.result(20).status_code == 200

    stored = page.locator('article.turn[data-state="stored"]')
    expect(stored).to_have_count(1)
    stored.locator("[data-ai-reasoning-toggle]").click()
    stored.locator("details.egress").evaluate("d => { d.open = true; }")
    expect(stored.locator(".reasoning-text")).to_have_text(hostile("reasoning"))
    expect(stored.locator(".answer")).to_have_text(hostile("answer"))
    expect(stored.locator(".model")).to_have_text(hostile("model"))
    expect(stored.locator(".finish")).to_have_text(f"finish: {hostile('finish')}")
    expect(stored.locator(".tool-name")).to_have_text(f"→ {hostile('tool-name')}")
    expect(stored.locator(".tool-id")).to_have_text(hostile("tool-id"))
    expect(stored.locator(".tool-args")).to_contain_text(
        json.dumps(hostile("args"), ensure_ascii=False)[1:-1]
    )
    expect(stored.locator(".input-text")).to_have_text(hostile("input"))
    expect(page.locator('#conversations [data-conversation="hostile-1"] .meta')).to_contain_text(
        hostile("model")
    )
    expect(page.locator("#model-filter option").nth(1)).to_have_text(hostile("model"))
    markup = "main img, main svg, main script, main [onerror], main [onload]"
    assert page.eval_on_selector_all(markup, "found => found.length") == 0
    assert page.evaluate("window.pwned") is None
    inspector.shoot("40-hostile-text")


def test_a_right_to_left_override_in_a_name_stays_inside_it(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    """Regression: an unclosed override in a model name ran on over the turn
    count and date after it in the list ("MP 44:03:01 ,6202 ,62 voN"), and one
    in a tool name over the call's id."""
    client = Client(proxy, "key-bidi")
    call = {"id": "call_bidi_7", "function": {"name": f"{RLO}lookup", "arguments": "{}"}}
    upstream.script(tool_stream(f"{RLO}model", "Thinking.", "Calling.", call))
    assert client.chat("bidi-1").status_code == 200
    page = inspector.open("key-bidi").page
    item = '#conversations [data-conversation="bidi-1"] .meta'
    expect(page.locator(item)).to_contain_text("1 turn")
    expect(page.locator(".tool-id")).to_have_text("call_bidi_7")
    assert left_to_right(page, item, "1 turn")
    assert left_to_right(page, ".tool-id", "call_bidi_7")
    # the name itself is drawn as its sender wrote it
    assert not left_to_right(page, ".tool-name", "lookup")
    inspector.shoot("41-bidi-override-contained")


def test_long_words_in_every_field_wrap_at_360_px(
    inspector: Inspector, upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    """Regression: a model name, finish reason or tool name without spaces
    ran thousands of pixels past a phone's screen (the list and the turn
    scrolled sideways); now every field wraps, and keeps its text."""
    client = Client(proxy, "key-long-words")

    def word(where: str) -> str:
        return f"{where}-" + "W" * 300 + " שלום مرحبا 🙂👨‍👩‍👧‍👦"

    call = {
        "id": word("call"),
        "function": {"name": word("tool"), "arguments": json.dumps({word("key"): word("value")})},
    }
    upstream.script(tool_stream(word("model"), word("reasoning"), word("answer"), call))
    body = {
        "model": word("request-model"),
        "stream": True,
        "messages": [{"role": "user", "content": word("input")}],
    }
    response = httpx.post(
        proxy.url + "/chat/completions",
        json=body,
        headers=client.headers({"X-Conversation-Id": "long-words-1"}),
        timeout=20,
    )
    assert response.status_code == 200
    page = inspector.page
    page.set_viewport_size({"width": 360, "height": 740})
    inspector.open("key-long-words")
    stored = page.locator('article.turn[data-state="stored"]')
    expect(stored).to_have_count(1)
    stored.locator("[data-ai-reasoning-toggle]").click()
    stored.locator("details.egress").evaluate("d => { d.open = true; }")
    expect(stored.locator(".model")).to_have_text(word("model"))
    expect(stored.locator(".finish")).to_have_text(f"finish: {hostile('finish')}")
    expect(stored.locator(".tool-name")).to_have_text(f"→ {word('tool')}")
    expect(stored.locator(".reasoning-text")).to_have_text(word("reasoning"))
    expect(page.locator('#conversations [data-conversation="long-words-1"] .meta')).to_contain_text(
        word("model")
    )
    widths = no_sideways_scroll(page)
    assert widths["page"] <= 360, widths
    assert widths["over"] == [], widths
    inspector.shoot("42-long-words-360")
