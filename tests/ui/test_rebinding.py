"""DNS rebinding in a real browser: a page whose owner points its name at
127.0.0.1 (Chromium resolves `rebound.example` there) is same-origin to
the proxy as far as the browser knows. The proxy refuses its requests by
their `Host`, so the page can neither read conversations nor spend the
route's key; the inspector by its own names still works."""

from __future__ import annotations

import httpx
from playwright.sync_api import Browser

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.ui.conftest import REBOUND

ANSWER = Json({"choices": [{"message": {"role": "assistant", "content": "private answer"}}]})
STEAL = """async () => {
  const list = await fetch('/v1/conversations');
  const spend = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: {'Content-Type': 'text/plain'},
    body: JSON.stringify({model: 'm', messages: [{role: 'user', content: 'hi'}]}),
  });
  return {list: list.status, listed: await list.text(), spend: spend.status};
}"""


def test_a_rebound_page_gets_nothing_from_the_proxy(
    browser: Browser, upstream: FakeUpstream
) -> None:
    with running_proxy(route_config(upstream, api_key="sk-route-rebound")) as proxy:
        upstream.script(ANSWER)
        own = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "secret plans"}]},
            headers={"X-Conversation-Id": "private-1"},
        )
        assert own.status_code == 200
        context = browser.new_context()
        page = context.new_page()
        try:
            # the page's own server answered first; now its name leads here
            landed = page.goto(f"http://{REBOUND}:{proxy.port}/ui")
            assert landed is not None
            assert landed.status == 403
            stolen = page.evaluate(STEAL)
            assert stolen["list"] == 403
            assert "private-1" not in stolen["listed"]
            assert "forbidden_host" in stolen["listed"]
            assert stolen["spend"] == 403
            # by the names a user types, the inspector is there
            for name in ("localhost", "127.0.0.1"):
                shown = page.goto(f"http://{name}:{proxy.port}/ui")
                assert shown is not None
                assert shown.status == 200
                listed = page.evaluate("() => fetch('/v1/conversations').then(r => r.text())")
                assert "private-1" in listed
        finally:
            page.close()
            context.close()
    assert len(upstream.requests) == 1
