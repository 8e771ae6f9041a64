"""A key the browser cannot send, in a real browser: one with a character an
HTTP header cannot carry (a zero-width space a paste brought along, an
emoji) gets a plain message on the page and no endless reconnecting; the
same key typed again without it works."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import Inspector


@pytest.mark.parametrize(
    ("key", "named"),
    [("sk-pasted\u200b-key", "U+200B"), ("sk-clé-🙂", '"🙂" (U+1F642)')],
)
def test_a_key_the_browser_cannot_send_says_so(inspector: Inspector, key: str, named: str) -> None:
    """Regression: fetch() refused the header, the page showed the browser's
    own words ("Failed to execute 'fetch' on 'Window' ...") and said
    "reconnecting…" for good, retrying a request that could never be sent."""
    page = inspector.open().page
    page.fill("#key", key)
    page.click("#key-form button[type=submit]")
    error = page.locator("#error")
    expect(error).to_contain_text(f"That key cannot be sent: it holds {named}")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "error")
    expect(page.locator("#scope")).to_have_text("a key that cannot be sent")
    page.wait_for_timeout(2000)  # past the feed's first retry and the list's fallback load
    expect(error).to_contain_text("That key cannot be sent")
    expect(error).not_to_contain_text("fetch")
    expect(page.locator("#live-status")).to_have_text("not connected")
    expect(page.locator("#no-conversations")).to_be_hidden()
    page.reload()  # the key is kept for the session: the same word again
    expect(error).to_contain_text(f"That key cannot be sent: it holds {named}")
    page.fill("#key", "sk-pasted-key")
    page.click("#key-form button[type=submit]")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(error).to_be_hidden()
    expect(page.locator("#scope")).to_have_text("this key's conversations")
