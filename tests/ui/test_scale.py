"""The inspector with a lot in it, in a real browser: a long live stream in a
long conversation does not make the page measure itself on every delta (the
cause of multi-second freezes), it still follows the stream at the bottom and
leaves a reader who scrolled up where they are; and an expanded megabyte of
reasoning lays out only the lines near the view. No timings are asserted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

from tests.harness import FakeUpstream, Json
from tests.ui.conftest import Client, Inspector, thinking_stream

Clients = Callable[[str | None], Client]

# Counts the reads of the conversation pane's scrollHeight made while the page
# handles a live feed event: a read after a change makes the browser lay the
# whole page out again before it can answer, once per delta.
COUNT_LAYOUT_READS = """(() => {
  const get = Object.getOwnPropertyDescriptor(Element.prototype, 'scrollHeight').get;
  window.layoutReads = 0;
  Object.defineProperty(Element.prototype, 'scrollHeight', {
    configurable: true,
    get() {
      if (this.id === 'conversation' && String(new Error().stack).includes('onFeedEvent')) {
        window.layoutReads += 1;
      }
      return get.call(this);
    },
  });
})();"""

# The lines whose content the browser skips laying out (content-visibility).
WATCH_SKIPPED = """() => {
  window.skipped = new Set();
  document.addEventListener('contentvisibilityautostatechange', (e) => {
    if (e.skipped) window.skipped.add(e.target); else window.skipped.delete(e.target);
  }, true);
}"""
IS_SKIPPED = "e => window.skipped.has(e)"

AT_BOTTOM = "e => e.scrollHeight - e.scrollTop - e.clientHeight < 48"


def whole(reasoning: str, answer: str) -> Json:
    message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
    return Json(
        {
            "id": "chatcmpl-scale",
            "object": "chat.completion",
            "created": 1,
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def stored(inspector: Inspector) -> Any:
    return inspector.page.locator('article.turn[data-state="stored"]')


def test_a_long_stream_follows_the_bottom_without_measuring_each_delta(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-scale")
    for n in range(12):
        upstream.script(whole(f"Thought {n}.", "An answer\n" * 6))
        assert client.chat("scale-1", stream=False).status_code == 200
    inspector.page.add_init_script(COUNT_LAYOUT_READS)
    inspector.open("key-scale")
    page = inspector.page
    pane = page.locator("#conversation")
    expect(stored(inspector)).to_have_count(12)
    assert pane.evaluate("e => e.scrollHeight > 2 * e.clientHeight"), "the pane scrolls"

    page.evaluate("() => { window.layoutReads = 0; }")
    upstream.script(
        thinking_stream(
            *[("reasoning", f"step {n}\n") for n in range(300)], ("content", "Done."), delay=0.002
        )
    )
    assert client.chat("scale-1").status_code == 200
    expect(stored(inspector)).to_have_count(13)
    # before: one read per delta; now the pane is scrolled once per frame
    assert page.evaluate("window.layoutReads") == 0
    page.wait_for_function(
        "() => { const e = document.getElementById('conversation');"
        " return e.scrollHeight - e.scrollTop - e.clientHeight < 48; }"
    )

    # a reader who scrolled up stays where they are while the next turn streams
    pane.evaluate("e => { e.scrollTop = 0; }")
    page.wait_for_function("() => document.getElementById('conversation').scrollTop === 0")
    upstream.script(thinking_stream(("reasoning", "More.\n" * 40), ("content", "Again.")))
    assert client.chat("scale-1").status_code == 200
    expect(stored(inspector)).to_have_count(14)
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert pane.evaluate("e => e.scrollTop") == 0
    assert not pane.evaluate(AT_BOTTOM)


def test_an_expanded_megabyte_of_reasoning_lays_out_only_what_is_in_view(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients
) -> None:
    client = client_factory("key-megabyte")
    lines = [f"line {n}:" + " some reasoning text" * 4 for n in range(11_000)]
    thought = "\n".join(lines)
    assert len(thought) > 1_000_000
    upstream.script(whole(thought, "Short answer."))
    assert client.chat("megabyte-1", stream=False).status_code == 200
    inspector.open("key-megabyte")
    page = inspector.page
    block = page.locator("[data-ai-reasoning]")
    expect(block).to_have_attribute("data-collapsed", "true")
    page.evaluate(WATCH_SKIPPED)
    block.locator("[data-ai-reasoning-toggle]").click()
    expect(block).to_have_attribute("data-collapsed", "false")
    rlines = block.locator(".rline")
    expect(rlines).to_have_count(len(lines))
    last = len(lines) - 1
    page.wait_for_function("() => window.skipped.has(document.querySelector('.rline:last-child'))")
    assert not rlines.first.evaluate(IS_SKIPPED), "the first line is laid out"
    # all of it is there, and a line is laid out once it comes into view
    text_length = block.locator(".reasoning-text").evaluate("e => e.textContent.length")
    assert text_length == len(thought) - last  # less the line breaks
    rlines.last.scroll_into_view_if_needed()
    page.wait_for_function("() => !window.skipped.has(document.querySelector('.rline:last-child'))")
    expect(rlines.last).to_have_text(lines[-1])
