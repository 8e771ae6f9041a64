"""The inspector page in a real browser (headless Chromium), in front of the
real proxy and the fake upstream streaming with delays: live reasoning,
collapse and expand by mouse and keyboard, the data-* attributes and the
toggle event, both themes, the reasoning-only notice, hidden reasoning and
tenant scoping. Each test leaves a screenshot in test-artifacts/ui/."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.harness import FakeUpstream, Json
from tests.ui.conftest import (
    ADMIN_TOKEN,
    Client,
    Inspector,
    preview_of,
    thinking_stream,
    token_estimate,
)

Clients = Callable[[str | None], Client]

THOUGHT = (
    "The user asks why the sky is blue. Sunlight scatters off air molecules, "
    "and shorter wavelengths scatter more (Rayleigh).\nSo blue dominates the sky."
)
ANSWER = "Because air scatters blue light more than red light."

COLLECT_TOGGLES = """() => {
  window.toggles = [];
  document.addEventListener('svmai:event', (e) => window.toggles.push(e.detail));
}"""


def reasoning_parts(text: str, size: int = 24) -> list[tuple[str, str]]:
    return [("reasoning", text[i : i + size]) for i in range(0, len(text), size)]


def completion(message: dict[str, Any]) -> Json:
    return Json(
        {
            "id": "chatcmpl-ui",
            "object": "chat.completion",
            "created": 1,
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def rgb(page: Page, selector: str, prop: str = "background-color") -> tuple[int, ...]:
    value = page.eval_on_selector(selector, f"e => getComputedStyle(e)[{prop!r}]")
    return tuple(int(n) for n in re.findall(r"\d+", value)[:3])


def luminance(color: tuple[int, ...]) -> float:
    r, g, b = color
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def stored_turns(page: Page) -> Locator:
    return page.locator('article.turn[data-state="stored"]')


# -- page load -------------------------------------------------------------------------


def test_the_page_loads_and_says_what_it_shows(inspector: Inspector) -> None:
    inspector.open()
    page = inspector.page
    expect(page).to_have_title("reasoning-proxy inspector")
    expect(page.locator("#scope")).to_have_text("anonymous conversations")
    expect(page.locator("#no-conversations")).to_be_visible()
    expect(page.get_by_label("API key or admin token")).to_have_attribute("type", "password")
    inspector.shoot("01-empty")


# -- a live stream ----------------------------------------------------------------------


def test_a_live_stream_dims_reasoning_then_collapses_it(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-live")
    inspector.open("key-live")
    page = inspector.page
    parts = [
        *reasoning_parts(THOUGHT, 12),
        ("content", "Because air scatters "),
        ("content", "blue light more."),
    ]
    upstream.script(thinking_stream(*parts))
    reply = client.chat_later("live-1")

    block = page.locator("[data-ai-reasoning]")
    expect(block).to_have_attribute("data-streaming", "true")
    # one snapshot of the streaming block, so the stream cannot move on between reads
    snapshot = block.evaluate(
        """e => ({
          streaming: e.dataset.streaming,
          collapsed: e.dataset.collapsed,
          expanded: e.querySelector('[data-ai-reasoning-toggle]').getAttribute('aria-expanded'),
          opacity: Number(getComputedStyle(e.querySelector('.reasoning-text')).opacity),
          fontStyle: getComputedStyle(e).fontStyle,
          estimate: Number(e.dataset.tokenEst),
          text: [...e.querySelectorAll('.rline')].map((l) => l.textContent).join('\\n'),
          turn: e.closest('article').dataset.state,
        })"""
    )
    assert snapshot["streaming"] == "true"
    assert snapshot["collapsed"] == "false"
    assert snapshot["expanded"] == "true"
    assert snapshot["opacity"] < 1, "streaming reasoning is dimmed"
    assert snapshot["fontStyle"] == "italic"
    assert snapshot["turn"] == "live"
    assert THOUGHT.startswith(snapshot["text"])
    # the live estimate follows the streamed text: ceil(characters / 4)
    assert snapshot["estimate"] == token_estimate(snapshot["text"])
    # the live turn's context sizes come from its turn_start event
    expect(page.locator("#context")).to_be_visible()
    inspector.shoot("02-live-streaming")

    # the answer starts: the reasoning steps aside to a one-line preview
    expect(page.locator("article.turn .answer")).to_contain_text("Because air")
    expect(block).to_have_attribute("data-collapsed", "true")
    expect(block).to_have_attribute("data-streaming", "false")
    toggle = block.locator("[data-ai-reasoning-toggle]")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(toggle).to_contain_text("▶")
    expect(toggle).to_contain_text(preview_of(THOUGHT))
    assert preview_of(THOUGHT) == '"' + THOUGHT[:40] + '…"'
    inspector.shoot("03-live-answer")

    assert reply.result(10).status_code == 200
    # the turn ends and is drawn again from the store
    expect(stored_turns(page)).to_have_count(1)
    expect(
        page.locator("article.turn[data-state=live], article.turn[data-state=ended]")
    ).to_have_count(0)
    stored = client.conversation("live-1")
    [turn] = stored["turns"]
    [thinking] = turn["blocks"]
    assert thinking["thought"] == THOUGHT
    block = stored_turns(page).locator("[data-ai-reasoning]")
    expect(block).to_have_attribute("data-collapsed", "true")
    expect(block).to_have_attribute("data-token-est", str(thinking["tokens"]))
    expect(page.locator("article.turn .answer")).to_have_text(
        "Because air scatters blue light more."
    )
    expect(page.locator("#context-effective")).to_have_text(str(stored["tokens"]["effective"]))
    expect(page.locator("#context-raw")).to_have_text(str(stored["tokens"]["raw"]))
    expect(page.locator("#conversations [data-conversation=live-1]")).to_contain_text("1 turn")
    inspector.shoot("04-live-stored")


def test_several_blocks_per_turn_stay_separate_in_scroll_back(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-blocks")
    inspector.open("key-blocks")
    page = inspector.page
    first, second = "First I look at the question itself.", "Then I check the tool result again."
    stream = thinking_stream(
        ("reasoning", first[:20]),
        ("reasoning", first[20:]),
        ("content", "Part one. "),
        ("reasoning", second),
        ("content", "Part two."),
    )
    # the upstream holds the stream after the second block (its role chunk,
    # three parts and the second block: 5 events) until the page was read
    stream.gate_after = 5
    upstream.script(stream)
    reply = client.chat_later("blocks-1")
    blocks = page.locator("article.turn[data-state=live] [data-ai-reasoning]")
    expect(blocks).to_have_count(2)
    expect(blocks.nth(1)).to_contain_text(second)
    # the first block, finished and collapsed, holds the estimate of its own text
    expect(blocks.nth(0)).to_have_attribute("data-collapsed", "true")
    expect(blocks.nth(0)).to_have_attribute("data-token-est", str(token_estimate(first)))
    stream.gate.set()
    assert reply.result(30).status_code == 200
    expect(stored_turns(page)).to_have_count(1)

    [turn] = client.conversation("blocks-1")["turns"]
    assert [b["thought"] for b in turn["blocks"]] == [first, second]
    blocks = stored_turns(page).locator("[data-ai-reasoning]")
    expect(blocks).to_have_count(2)
    for n, data in enumerate(turn["blocks"]):
        expect(blocks.nth(n)).to_have_attribute("data-collapsed", "true")
        expect(blocks.nth(n)).to_have_attribute("data-token-est", str(data["tokens"]))
        expect(blocks.nth(n).locator("[data-ai-reasoning-toggle]")).to_contain_text(
            preview_of(data["thought"])
        )

    # the next turn of the conversation streams in below; the first stays
    upstream.script(thinking_stream(("reasoning", "A second turn's thought."), ("content", "Two.")))
    assert client.chat_later("blocks-1").result(30).status_code == 200
    expect(stored_turns(page)).to_have_count(2)
    expect(page.locator("[data-ai-reasoning]")).to_have_count(3)
    inspector.shoot("05-several-blocks")


# -- toggling -------------------------------------------------------------------------------


def test_click_and_keyboard_toggle_and_announce_it(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-toggle")
    upstream.script(
        completion({"role": "assistant", "reasoning_content": THOUGHT, "content": ANSWER})
    )
    assert client.chat("toggle-1", stream=False).status_code == 200
    [turn] = client.conversation("toggle-1")["turns"]
    tokens = turn["blocks"][0]["tokens"]
    assert isinstance(tokens, int)

    inspector.open("key-toggle")
    page = inspector.page
    page.evaluate(COLLECT_TOGGLES)
    block = page.locator("[data-ai-reasoning]")
    toggle = block.locator("[data-ai-reasoning-toggle]")
    text = block.locator(".reasoning-text")
    expect(block).to_have_attribute("data-collapsed", "true")
    expect(block).to_have_attribute("data-token-est", str(tokens))
    expect(text).to_be_hidden()
    assert toggle.evaluate("e => e.tagName") == "BUTTON"

    toggle.click()
    expect(block).to_have_attribute("data-collapsed", "false")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(text).to_be_visible()
    expect(text).to_have_text(THOUGHT.replace("\n", ""))  # one element per line
    expect(text.locator(".rline")).to_have_count(2)
    gutter = text.locator(".rline").first.evaluate("e => getComputedStyle(e, '::before').content")
    assert "│" in gutter
    inspector.shoot("06-expanded")

    toggle.click()
    expect(block).to_have_attribute("data-collapsed", "true")
    expect(text).to_be_hidden()

    toggle.focus()
    page.keyboard.press("Enter")
    expect(block).to_have_attribute("data-collapsed", "false")
    page.keyboard.press("Space")
    expect(block).to_have_attribute("data-collapsed", "true")
    expect(toggle).to_be_focused()

    msg_id = "toggle-1:0"
    assert page.evaluate("window.toggles") == [
        {
            "type": "reasoning_toggle",
            "payload": {"msgId": msg_id, "expanded": expanded, "tokens": tokens},
        }
        for expanded in (True, False, True, False)
    ]
    # the event bubbles: it reaches window as well as document
    page.evaluate(
        "() => { window.seen = 0; window.addEventListener('svmai:event', () => window.seen++); }"
    )
    toggle.click()
    assert page.evaluate("window.seen") == 1


# -- themes ----------------------------------------------------------------------------------


def test_shading_follows_the_colour_scheme_and_the_toggle(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-theme")
    upstream.script(
        completion({"role": "assistant", "reasoning_content": THOUGHT, "content": ANSWER})
    )
    assert client.chat("theme-1", stream=False).status_code == 200
    page = inspector.page
    page.emulate_media(color_scheme="light")
    inspector.open("key-theme")
    page.click("[data-ai-reasoning-toggle]")
    shade, body = "[data-ai-reasoning]", "body"

    light_shade, light_page = rgb(page, shade), rgb(page, body)
    assert luminance(light_shade) < luminance(light_page), "light mode: reasoning is darker"
    expect(page.locator("#theme-toggle")).to_have_text("Dark theme")
    inspector.shoot("07-theme-light")

    page.emulate_media(color_scheme="dark")
    dark_shade, dark_page = rgb(page, shade), rgb(page, body)
    assert luminance(dark_shade) > luminance(dark_page), "dark mode: reasoning is lighter"
    assert dark_shade != light_shade
    expect(page.locator("#theme-toggle")).to_have_text("Light theme")
    inspector.shoot("08-theme-dark")

    # the toggle overrides the system's choice, both ways
    page.click("#theme-toggle")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    assert rgb(page, shade) == light_shade
    page.emulate_media(color_scheme="light")
    page.click("#theme-toggle")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    assert rgb(page, shade) == dark_shade
    assert rgb(page, body) == dark_page
    inspector.shoot("09-theme-toggled-dark")
    # and it is remembered across a reload
    page.reload()
    page.wait_for_selector("[data-ai-reasoning]")
    assert rgb(page, shade) == dark_shade


# -- what is shown, and what is not ------------------------------------------------------------


def test_reasoning_without_an_answer_is_not_an_error(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-no-answer")
    inspector.open("key-no-answer")
    page = inspector.page
    upstream.script(
        thinking_stream(*reasoning_parts("I considered it and had nothing more to add."))
    )
    assert client.chat_later("no-answer-1").result(10).status_code == 200
    expect(stored_turns(page)).to_have_count(1)
    expect(page.locator("[data-notice=reasoning-only]")).to_have_text(
        "Model provided reasoning but no response."
    )
    expect(page.locator("[data-ai-reasoning]")).to_have_attribute("data-collapsed", "true")
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator(".badge.warn")).to_have_count(0)
    inspector.shoot("10-reasoning-only")


@pytest.mark.parametrize(
    "thought",
    [
        " " * 999 + "😀 and then the thought goes on",  # (the window was 1,000 code units)
        "\n" * 2000 + "After a long blank stretch, the reasoning starts here at last.",
        "x" * 999 + "😀" + "y" * 10,
    ],
    ids=["emoji-at-the-cut", "leading-blank-lines", "long-word"],
)
def test_the_preview_starts_at_the_text_and_never_splits_a_character(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients, thought: str
) -> None:
    """The live view collapses reasoning to a preview when the answer starts,
    from the text as it streamed (the stored turn's is stripped)."""
    key = f"key-preview-{len(thought)}"  # (one server serves every case)
    client = client_factory(key)
    inspector.open(key)
    stream = thinking_stream(("reasoning", thought), ("content", "The answer."))
    stream.gate_after = 3  # role chunk, reasoning, answer: held there until read
    upstream.script(stream)
    reply = client.chat_later(key)
    toggle = inspector.page.locator("article.turn[data-state=live] [data-ai-reasoning-toggle]")
    expect(toggle).to_contain_text(preview_of(thought))
    text = toggle.text_content() or ""
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    stream.gate.set()
    assert reply.result(30).status_code == 200


def test_reasoning_kept_from_the_client_is_not_shown(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-hidden")
    inspector.open("key-hidden")
    page = inspector.page
    page.evaluate(
        """() => {
          window.reasoningSeen = false;
          new MutationObserver(() => {
            if (document.querySelector('[data-ai-reasoning]')) window.reasoningSeen = true;
          }).observe(document.body, { childList: true, subtree: true });
        }"""
    )
    upstream.script(thinking_stream(*reasoning_parts(THOUGHT), ("content", ANSWER)))
    reply = client.chat_later("hidden-1", headers={"X-Reasoning-Include-In-Response": "false"})
    assert reply.result(10).status_code == 200
    expect(stored_turns(page)).to_have_count(1)
    expect(page.locator(".answer")).to_have_text(ANSWER)
    [turn] = client.conversation("hidden-1")["turns"]
    assert [b["isHidden"] for b in turn["blocks"]] == [True]  # stored, but hidden
    assert page.evaluate("window.reasoningSeen") is False
    expect(page.locator("[data-ai-reasoning]")).to_have_count(0)
    expect(page.locator(".turns")).not_to_contain_text("Rayleigh")
    inspector.shoot("11-hidden-reasoning")


def test_another_key_sees_nothing_and_the_admin_sees_all(
    inspector: Inspector, browser: Browser, upstream: FakeUpstream, client_factory: Clients
) -> None:
    owner = client_factory("key-owner")
    upstream.script(
        completion(
            {
                "role": "assistant",
                "reasoning_content": "Owner's thought.",
                "content": "Owner's answer.",
            }
        )
    )
    assert owner.chat("owned-1", stream=False).status_code == 200

    other = inspector.open("key-someone-else").page
    admin_context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        admin_page = admin_context.new_page()
        admin = Inspector(admin_page, inspector.proxy, inspector.errors)
        admin.open(ADMIN_TOKEN)
        expect(admin_page.locator("#scope")).to_have_text("every tenant (admin)")
        expect(admin_page.locator("#conversations [data-conversation=owned-1]")).to_have_count(1)

        # a live turn of the owner reaches the admin, not the other key
        upstream.script(
            thinking_stream(("reasoning", "Owner thinks live."), ("content", "Live answer."))
        )
        assert owner.chat_later("owned-2").result(10).status_code == 200
        expect(admin_page.locator("#conversations [data-conversation=owned-2]")).to_have_count(1)
        expect(stored_turns(admin_page).locator(".answer")).to_have_text("Live answer.")
        expect(admin_page.locator("#conversations [data-conversation=owned-2]")).to_contain_text(
            "tenant t-"
        )
        admin.shoot("12-admin-sees-all")

        expect(other.locator("#scope")).to_have_text("this key's conversations")
        expect(other.locator("#conversations li")).to_have_count(0)
        expect(other.locator("#no-conversations")).to_be_visible()
        expect(other.locator("article.turn")).to_have_count(0)
        inspector.shoot("13-other-key-sees-nothing")
    finally:
        admin_context.close()


def test_the_key_is_kept_for_the_session_only(
    inspector: Inspector, client_factory: Clients
) -> None:
    page = inspector.open("key-session").page
    assert page.evaluate("sessionStorage.getItem('reasoning-proxy.key')") == "key-session"
    assert page.evaluate("localStorage.getItem('reasoning-proxy.key')") is None
    page.reload()
    expect(page.locator("#key")).to_have_value("key-session")
    expect(page.locator("#scope")).to_have_text("this key's conversations")
    page.click("#key-clear")
    expect(page.locator("#scope")).to_have_text("anonymous conversations")
    assert page.evaluate("sessionStorage.getItem('reasoning-proxy.key')") is None


def test_a_list_cut_at_a_thousand_says_so(browser: Browser, upstream: FakeUpstream) -> None:
    """Over 1,000 conversations: the page lists the 1,000 most recent and says
    that older ones were left out (the API's `has_more`)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from tests.harness import route_config, running_proxy

    key = {"Authorization": "Bearer key-a-thousand-and-one"}
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=20) as http:

        def chat(n: int) -> int:
            headers = {**key, "X-Conversation-Id": f"many-{n:04d}"}
            return http.post(
                proxy.url + "/chat/completions", json=body, headers=headers
            ).status_code

        assert chat(0) == 200  # the oldest, before the others start
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(chat, range(1, 1001))) == {200}
        page = browser.new_page()
        try:
            page.goto(proxy.base + "/ui")
            page.fill("#key", "key-a-thousand-and-one")
            page.click("#key-form button[type=submit]")
            # (a thousand items: more time than a page of a few)
            expect(page.locator("#more-conversations")).to_be_visible(timeout=30_000)
            expect(page.locator("#conversations li")).to_have_count(1000, timeout=30_000)
            expect(page.locator('[data-conversation="many-1000"]')).to_have_count(1)
            expect(page.locator('[data-conversation="many-0000"]')).to_have_count(0)
        finally:
            page.close()


@pytest.mark.parametrize("trouble", ["key required", "store down"])
def test_a_list_that_could_not_be_read_does_not_say_there_are_none(
    browser: Browser, upstream: FakeUpstream, refusing_port: int, trouble: str
) -> None:
    """Regression: when the list failed (401 without a key where one is
    required, 503 with the store down), the page showed the error and
    also "No conversations yet", as if it had read an empty list."""
    from tests.harness import route_config, running_proxy

    if trouble == "key required":
        top: dict[str, Any] = {"server": {"require_auth": True}}
        said = "This proxy requires an API key"
    else:
        top = {"store": {"url": f"redis://127.0.0.1:{refusing_port}/0"}}
        said = "The store is unavailable."
    with running_proxy(route_config(upstream, top=top)) as proxy:
        page = browser.new_page()
        try:
            page.goto(proxy.base + "/ui")
            expect(page.locator("#error")).to_contain_text(said)
            page.wait_for_timeout(2000)  # past the page's fallback load without a feed
            expect(page.locator("#error")).to_contain_text(said)
            expect(page.locator("#no-conversations")).to_be_hidden()
            if trouble == "key required":  # nor does it call the caller anonymous
                expect(page.locator("#scope")).to_have_text("no key (this proxy requires one)")
        finally:
            page.close()
