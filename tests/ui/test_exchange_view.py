"""The inspector shows the whole exchange and what the proxy did: each turn's
input (ui.show_prompts), tool calls with name and arguments, tool results,
what was re-injected or stripped upstream and why; search, filter and
delete; dates on times; the theme button's label; and a phone's width
(390 px) without sideways scrolling. Screenshots in test-artifacts/ui/."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests import casefiles
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.ui.conftest import ADMIN_TOKEN, Inspector

ARGS = json.dumps({"a": 17, "b": 23})
CALL = {"id": "call_17x23", "type": "function", "function": {"name": "multiply", "arguments": ARGS}}
QUESTION = {"role": "user", "content": "What is 17 * 23?"}
PLAN = "I will multiply 17 by 23 with the tool."


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    # a kimi route (reasoning goes back on tool-call turns), prompts shown
    config = route_config(upstream_server, dialect="kimi", top={"ui": {"show_prompts": True}})
    with running_proxy(config, env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN_TOKEN}) as server:
        yield server


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return casefiles.chunk(delta, finish, model="kimi-k2", id="chatcmpl-ui")


def completion(content: str, model: str = "kimi-k2") -> Json:
    return Json(
        {
            "id": "chatcmpl-ui",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "reasoning_content": "r"},
                    "finish_reason": "stop",
                }
            ],
        }
    )


def post(
    proxy: ProxyServer, key: str, conversation: str, messages: list[Any], **headers: str
) -> None:
    response = httpx.post(
        f"{proxy.url}/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Conversation-Id": conversation, **headers},
        json={"model": "kimi-k2", "stream": True, "messages": messages},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def tool_loop(proxy: ProxyServer, upstream: FakeUpstream, key: str, conversation: str) -> None:
    """Question -> tool call -> tool result -> answer -> follow-up without reasoning back."""
    upstream.script(
        Stream(
            [
                chunk({"role": "assistant", "content": "", "reasoning_content": PLAN}),
                chunk({"tool_calls": [{"index": 0, **CALL}]}),
                chunk({}, "tool_calls"),
            ]
        ),
        Stream(
            [chunk({"reasoning_content": "The tool says 391."}), chunk({"content": "391"}, "stop")]
        ),
        Stream([chunk({"reasoning_content": "Yes."}), chunk({"content": "Sure: 391."}, "stop")]),
    )
    post(proxy, key, conversation, [QUESTION])
    history = [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": "391"},
    ]
    post(proxy, key, conversation, history, **{"X-Reasoning-Include-In-Context": "true"})
    follow = [
        *history,
        {"role": "assistant", "content": "391"},
        {"role": "user", "content": "Are you sure?"},
    ]
    post(proxy, key, conversation, follow, **{"X-Reasoning-Include-In-Context": "false"})


def no_sideways_scroll(page: Page) -> dict[str, Any]:
    """Widths that overflow: the document, and every pane or block that would scroll or clip."""
    result: dict[str, Any] = page.evaluate(
        """() => {
          const out = {page: document.documentElement.scrollWidth, over: []};
          for (const e of document.querySelectorAll('body *')) {
            if (!e.offsetParent && getComputedStyle(e).position !== 'fixed') continue;
            const r = e.getBoundingClientRect();
            if (r.width === 0) continue;
            if (r.right > window.innerWidth + 0.5 || e.scrollWidth > e.clientWidth + 1 &&
                getComputedStyle(e).overflowX !== 'visible' &&
                !e.matches('.preview, .id, .reasoning-toggle *')) {
              const what = `${e.tagName}.${e.className}`;
              out.over.push(`${what} right=${r.right} sw=${e.scrollWidth} cw=${e.clientWidth}`);
            }
          }
          return out;
        }"""
    )
    return result


# -- the whole exchange -----------------------------------------------------------------------


def test_input_tool_calls_results_and_what_went_upstream(
    inspector: Inspector, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    tool_loop(proxy, upstream, "key-exchange", "exchange-1")
    page = inspector.open("key-exchange").page
    turns = page.locator('article.turn[data-state="stored"]')
    expect(turns).to_have_count(3)
    first, second, third = turns.nth(0), turns.nth(1), turns.nth(2)

    # the user's message, the tool call with its name and arguments
    expect(first.locator('.input[data-role="user"] .input-text')).to_have_text("What is 17 * 23?")
    expect(first.locator(".tool-call .tool-name")).to_have_text("→ multiply")
    expect(first.locator(".tool-call .tool-id")).to_have_text("call_17x23")
    expect(first.locator(".tool-args")).to_have_text(json.dumps({"a": 17, "b": 23}, indent=2))
    expect(first.locator(".egress summary")).to_have_text(
        "Sent upstream: no earlier assistant message (kimi)"
    )

    # the tool's result, and the stored plan re-injected on the way up
    result = second.locator(".input.tool-result")
    expect(result.locator(".input-label")).to_have_text("Tool result · call_17x23")
    expect(result.locator(".input-text")).to_have_text("391")
    expect(second.locator(".egress summary")).to_have_text("Sent upstream: 1 re-injected (kimi)")
    second.locator(".egress summary").click()
    note = second.locator('.egress li[data-action="reinjected"]')
    expect(note.locator(".egress-action")).to_have_text(
        "Message 2 (tool call): re-injected from the store"
    )
    expect(note.locator(".egress-why")).to_have_text(
        "include_in_context true, strip_from_context none keeps it"
    )

    # the follow-up asked for nothing back: both stripped, with the reason
    expect(third.locator('.input[data-role="user"] .input-text')).to_have_text("Are you sure?")
    expect(third.locator(".egress summary")).to_have_text("Sent upstream: 2 stripped (kimi)")
    third.locator(".egress summary").click()
    stripped = third.locator('.egress li[data-action="stripped"]')
    expect(stripped).to_have_count(2)
    expect(stripped.first.locator(".egress-why").first).to_have_text("include_in_context false")
    expect(stripped.first).to_contain_text("the dialect's placeholder went in its place")
    inspector.shoot("20-whole-exchange")


def test_dates_on_times_and_the_theme_button_names_what_it_switches_to(
    inspector: Inspector, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(completion("Dated."))
    post(proxy, "key-dates", "dated-1", [QUESTION])
    page = inspector.page
    page.emulate_media(color_scheme="light")
    inspector.open("key-dates")
    year = str(datetime.datetime.now().year)
    stamp = page.locator('article.turn[data-state="stored"] time')
    expect(stamp).to_contain_text(year)
    assert (stamp.get_attribute("datetime") or "").startswith(year)
    expect(page.locator("#conversations [data-conversation=dated-1] .meta")).to_contain_text(year)

    toggle = page.locator("#theme-toggle")
    expect(toggle).to_have_text("Dark theme")  # light now: it switches to dark
    toggle.click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(toggle).to_have_text("Light theme")
    inspector.shoot("21-dates-dark")
    toggle.click()
    expect(toggle).to_have_text("Dark theme")


# -- search, filter, delete ---------------------------------------------------------------------


def test_search_filter_and_delete(
    inspector: Inspector, browser: Browser, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    key = "key-search"
    for conversation, model in (
        ("alpha-1", "kimi-k2"),
        ("beta-2", "kimi-k2"),
        ("gamma-3", "kimi-lite"),
    ):
        upstream.script(completion(f"Answer of {conversation}.", model=model))
        post(proxy, key, conversation, [QUESTION])
    page = inspector.open(key).page
    items = page.locator("#conversations [data-conversation]")
    expect(items).to_have_count(3)

    page.fill("#search", "BETA")
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-conversation", "beta-2")
    page.fill("#search", "lite")  # models match too
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-conversation", "gamma-3")
    page.fill("#search", "nothing like it")
    expect(items).to_have_count(0)
    expect(page.locator("#no-match")).to_be_visible()
    page.fill("#search", "")
    page.select_option("#model-filter", "kimi-k2")
    expect(items).to_have_count(2)
    inspector.shoot("22-filtered")
    page.select_option("#model-filter", "")
    expect(items).to_have_count(3)

    # delete: the first click asks, the second deletes
    page.click("#conversations [data-conversation=alpha-1]")
    expect(page.locator("#conversation-title")).to_have_text("alpha-1")
    delete = page.locator("#delete")
    delete.click()
    expect(delete).to_have_text("Delete: sure?")
    delete.click()
    expect(page.locator("#conversations [data-conversation=alpha-1]")).to_have_count(0)
    expect(items).to_have_count(2)
    gone = httpx.get(
        f"{proxy.url}/conversations/alpha-1", headers={"Authorization": f"Bearer {key}"}
    )
    assert gone.status_code == 404

    # the admin deletes another tenant's conversation
    admin_context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        admin_page = admin_context.new_page()
        admin_page.on("pageerror", lambda e: inspector.errors.append(str(e)))
        Inspector(admin_page, proxy, inspector.errors).open(ADMIN_TOKEN)
        admin_page.click("#conversations [data-conversation=beta-2]")
        expect(admin_page.locator('article.turn[data-state="stored"]')).to_have_count(1)
        admin_page.click("#delete")
        admin_page.click("#delete")
        expect(admin_page.locator("#conversations [data-conversation=beta-2]")).to_have_count(0)
    finally:
        admin_context.close()
    remaining = httpx.get(f"{proxy.url}/conversations", headers={"Authorization": f"Bearer {key}"})
    assert [c["id"] for c in remaining.json()["data"]] == ["gamma-3"]


# -- a phone's width ------------------------------------------------------------------------------


def test_a_phone_width_has_no_sideways_scrolling(
    browser: Browser, proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    key = "key-phone"
    long_id = "phone-" + "x" * 100 + ".long:id"
    tool_loop(proxy, upstream, key, long_id)
    upstream.script(completion("A-very-long-word-without-spaces-" * 12))
    post(proxy, key, "phone-2", [QUESTION])
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        phone = Inspector(page, proxy, errors).open(key)
        page.click(f'#conversations [data-conversation="{long_id}"]')
        expect(page.locator('article.turn[data-state="stored"]')).to_have_count(3)
        for summary in page.locator(".egress summary").all():
            summary.click()
        page.locator("[data-ai-reasoning-toggle]").first.click()
        widths = no_sideways_scroll(page)
        assert widths["page"] <= 390, widths
        assert widths["over"] == [], widths
        phone.shoot("23-phone-390")
        page.click("#conversations [data-conversation=phone-2]")
        expect(page.locator(".answer")).to_contain_text("A-very-long-word")
        widths = no_sideways_scroll(page)
        assert widths["page"] <= 390, widths
        assert widths["over"] == [], widths
        phone.shoot("24-phone-390-answer")
    finally:
        context.close()
    assert errors == []
