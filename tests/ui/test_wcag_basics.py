"""The inspector's accessibility basics in a real browser, at a small phone's
width (360 px), in the light and the dark colour scheme, with a stream held
mid-way so its live marks are on screen: every text (placeholders, badges,
the dimmed streaming reasoning included) reads at WCAG AA contrast, the page
has headings, its controls are buttons with a visible focus ring, the
collapsibles say whether they are expanded, and nothing scrolls sideways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.harness import FakeUpstream
from tests.ui.conftest import Client, Inspector, thinking_stream
from tests.ui.test_exchange_view import no_sideways_scroll

Clients = Callable[[str | None], Client]

AA = 4.5  # WCAG 2 AA, normal-size text

# For each visible text (an element's own text nodes, a pseudo-element's
# content with letters, an empty input's placeholder): its colour, faded by
# the opacity of it and its ancestors, over the background behind it, as the
# WCAG contrast ratio. The reasoning's gutter glyphs are decoration.
CONTRAST = """() => {
  const parse = (c) => {
    const m = c.match(/[\\d.]+/g).map(Number);
    return {r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1};
  };
  const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = (c) => 0.2126 * lin(c.r) + 0.7152 * lin(c.g) + 0.0722 * lin(c.b);
  const mix = (f, b, k) => f[k] * f.a + b[k] * (1 - f.a);
  const over = (f, b) => ({r: mix(f, b, 'r'), g: mix(f, b, 'g'), b: mix(f, b, 'b'), a: 1});
  const background = (e) => {
    const layers = [];
    for (let n = e; n; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c.a > 0) layers.push(c);
      if (c.a === 1) break;
    }
    return layers.reverse().reduce((bg, c) => over(c, bg), {r: 255, g: 255, b: 255, a: 1});
  };
  const opacity = (e) => {
    let o = 1;
    for (let n = e; n; n = n.parentElement) o *= Number(getComputedStyle(n).opacity);
    return o;
  };
  const out = [];
  const check = (e, style, what, text) => {
    const bg = background(e);
    const fg = parse(style.color);
    fg.a *= opacity(e);
    const a = lum(over(fg, bg)), b = lum(bg);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    out.push({what, text: text.slice(0, 40), ratio: Math.round(ratio * 100) / 100});
  };
  for (const e of document.querySelectorAll('body *')) {
    if (!e.checkVisibility()) continue;
    const name = `${e.tagName.toLowerCase()}.${e.className}`;
    const own = [...e.childNodes]
      .filter((n) => n.nodeType === 3 && n.data.trim())
      .map((n) => n.data)
      .join('');
    if (own) check(e, getComputedStyle(e), name, own);
    for (const pseudo of ['::before', '::after']) {
      const style = getComputedStyle(e, pseudo);
      if (e.matches('.rline') && pseudo === '::before') continue;
      if (/^".*[A-Za-z].*"$/.test(style.content)) check(e, style, name + pseudo, style.content);
    }
    if (e.tagName === 'INPUT' && e.placeholder && !e.value) {
      check(e, getComputedStyle(e, '::placeholder'), `${name}::placeholder`, e.placeholder);
    }
  }
  return out;
}"""


def phone(inspector: Inspector, scheme: str) -> Page:
    page = inspector.page
    page.set_viewport_size({"width": 360, "height": 740})
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    return page


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_contrast_focus_and_structure_at_360_px(
    inspector: Inspector, upstream: FakeUpstream, client_factory: Clients, scheme: str
) -> None:
    key = f"key-a11y-{scheme}"
    client = client_factory(key)
    upstream.script(thinking_stream(("reasoning", "An earlier thought."), ("content", "Earlier.")))
    assert client.chat("a11y-1").status_code == 200
    page = phone(inspector, scheme)
    inspector.open(key)
    expect(page.locator('article.turn[data-state="stored"]')).to_have_count(1)

    # a stream held after its first reasoning: live marks and dimmed reasoning on screen
    stream = thinking_stream(("reasoning", "Thinking it over, still."), ("content", "Done."))
    stream.gate_after = 2
    upstream.script(stream)
    reply = client.chat_later("a11y-1")
    try:
        live = page.locator('article.turn[data-state="live"] [data-ai-reasoning]')
        expect(live).to_have_attribute("data-streaming", "true")
        expect(live).to_contain_text("Thinking it over, still.")
        expect(page.locator('#conversations [data-live="true"]')).to_have_count(1)
        texts: list[dict[str, Any]] = page.evaluate(CONTRAST)
        shown = {t["what"] for t in texts}
        for what in ("span.badge live", "div.rline", "span.id::after", "input.::placeholder"):
            assert what in shown, (what, shown)
        low = [t for t in texts if t["ratio"] < AA]
        assert low == [], low
        widths = no_sideways_scroll(page)
        assert widths["page"] <= 360, widths
        assert widths["over"] == [], widths
        inspector.shoot(f"30-contrast-{scheme}-360")
    finally:
        stream.gate.set()
    assert reply.result(30).status_code == 200
    expect(page.locator('article.turn[data-state="stored"]')).to_have_count(2)

    # headings name the page and its two panes
    expect(page.locator("h1")).to_have_count(1)
    expect(page.get_by_role("heading", level=2, name="Conversations")).to_have_count(1)
    expect(page.get_by_role("heading", level=2, name="a11y-1")).to_have_count(1)
    # each turn is a heading of its own, to jump from turn to turn
    expect(page.get_by_role("heading", level=3, name="Turn 1")).to_have_count(1)
    expect(page.get_by_role("heading", level=3, name="Turn 2")).to_have_count(1)
    # every toggle is a button that says whether it is expanded, and shows its focus
    toggles = page.locator("[data-ai-reasoning-toggle]")
    expect(toggles).to_have_count(2)
    for toggle in toggles.all():
        assert toggle.evaluate("e => e.tagName") == "BUTTON"
        expect(toggle).to_have_attribute("aria-expanded", "false")
    page.locator("#conversations [data-conversation='a11y-1']").focus()
    page.keyboard.press("Tab")  # from the list, on into the conversation
    for _ in range(20):
        if page.evaluate("document.activeElement.matches('[data-ai-reasoning-toggle]')"):
            break
        page.keyboard.press("Tab")
    focused = page.locator(":focus")
    expect(focused).to_have_attribute("data-ai-reasoning-toggle", "")
    ring = focused.evaluate("e => [getComputedStyle(e).outlineStyle, getComputedStyle(e).outline]")
    assert ring[0] != "none", ring
    assert not ring[1].startswith("0px"), ring
    page.keyboard.press("Enter")
    expect(focused).to_have_attribute("aria-expanded", "true")
