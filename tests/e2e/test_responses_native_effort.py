"""Reasoning controls on `api: responses` routes, through real sockets with
the official SDK: an effort is mapped per model as on chat routes (the
model's own values: gpt-5.1 takes no `xhigh`, gpt-5 no `none`), and
`enabled: false` becomes the model's lowest effort where that is its off
switch, so it is honoured, not named in `X-Reasoning-Ignored`."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy
from tests.test_responses_native import BASE, message


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, api="responses")) as server:
        yield server


@pytest.mark.parametrize(
    ("model", "headers", "body_reasoning", "sent", "ignored"),
    [
        ("gpt-5.1", {"X-Reasoning-Effort": "xhigh"}, None, {"effort": "high"}, None),
        ("gpt-5.2", {"X-Reasoning-Effort": "xhigh"}, None, {"effort": "xhigh"}, None),
        ("gpt-5", {"X-Reasoning-Effort": "none"}, None, {"effort": "minimal"}, None),
        ("gpt-5.1", {"X-Reasoning-Enabled": "false"}, None, {"effort": "none"}, None),
        # a header's off switch wins over the body's own effort
        ("gpt-5.1", {"X-Reasoning-Enabled": "false"}, {"effort": "high"}, {"effort": "none"}, None),
        # the body's own effort is this door's effort control: mapped the same way
        ("gpt-5.1", {}, {"effort": "xhigh"}, {"effort": "high"}, None),
        ("gpt-5", {}, {"effort": "none"}, {"effort": "minimal"}, None),
        # a model without known efforts: as named; no off switch to send
        ("my-model", {"X-Reasoning-Effort": "xhigh"}, None, {"effort": "xhigh"}, None),
        ("my-model", {"X-Reasoning-Enabled": "false"}, None, None, "enabled"),
        ("gpt-5.1", {"X-Reasoning-Max-Tokens": "64"}, None, None, "max_tokens"),
    ],
)
def test_the_settings_become_the_models_reasoning_effort(
    proxy: ProxyServer,
    upstream: FakeUpstream,
    model: str,
    headers: dict[str, str],
    body_reasoning: dict[str, str] | None,
    sent: dict[str, str] | None,
    ignored: str | None,
) -> None:
    upstream.script(Json({**BASE, "status": "completed", "output": [message("Done.")]}))
    client = openai.OpenAI(
        base_url=proxy.url, api_key="sk-effort", max_retries=0, default_headers=headers
    )
    with client:
        extra = {"reasoning": body_reasoning} if body_reasoning else {}
        raw = client.responses.with_raw_response.create(model=model, input="Go", **extra)  # type: ignore[call-overload]
    assert raw.parse().output_text == "Done."
    (request,) = upstream.requests
    assert request.json.get("reasoning") == sent
    assert raw.headers.get("x-reasoning-ignored") == ignored
