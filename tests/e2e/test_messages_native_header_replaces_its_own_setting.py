"""A Messages upstream (`api: messages`): an X-Reasoning-* header replaces
the body's own parameter of its setting only (`thinking` for enabled and
max_tokens, `output_config.effort` for effort). A header for one setting
leaves the body's other parameter as the client wrote it, whatever a
profile or the route says: the body's `adaptive` thinking is not made a
profile's budget because a header set the effort, and the body's effort
`max` is not made `xhigh` because a header set the budget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy
from tests.messages_wire import sdk_client

ANSWER = {
    "id": "msg_up",
    "type": "message",
    "role": "assistant",
    "model": "claude-up",
    "content": [{"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeUpstream, ProxyServer]]:
    upstream = FakeUpstream().start()
    config = route_config(
        upstream,
        api="messages",
        reasoning={"effort": "medium"},
        top={"profiles": {"deep": {"maxTokens": 700, "effort": "low"}}},
    )
    try:
        with running_proxy(config) as proxy:
            yield upstream, proxy
    finally:
        upstream.stop()


def send(
    served: tuple[FakeUpstream, ProxyServer], headers: dict[str, str], **body: Any
) -> dict[str, Any]:
    """The reasoning parameters the upstream got for an SDK request."""
    upstream, proxy = served
    upstream.reset()
    upstream.script(Json(ANSWER))
    sdk_client(proxy.base, "sk-ant-client").messages.create(
        model="claude-up",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers=headers,
        **body,
    )
    (sent,) = [r.json for r in upstream.requests if r.path == "/v1/messages"]
    return {k: sent[k] for k in ("thinking", "output_config") if k in sent}


ADAPTIVE = {"thinking": {"type": "adaptive"}}
BUDGET = {"thinking": {"type": "enabled", "budget_tokens": 2000}}
MAX = {"output_config": {"effort": "max"}}
PROFILE = {"X-Reasoning-Profile": "deep"}

CASES = [
    # a header for the effort: the body's thinking stays, the profile's budget does not go
    (
        {**PROFILE, "X-Reasoning-Effort": "high"},
        ADAPTIVE,
        {**ADAPTIVE, "output_config": {"effort": "high"}},
    ),
    (
        {**PROFILE, "X-Reasoning-Effort": "high"},
        BUDGET,
        {**BUDGET, "output_config": {"effort": "high"}},
    ),
    # a header for the budget: the body's effort stays as written
    (
        {"X-Reasoning-Max-Tokens": "3000"},
        {**ADAPTIVE, **MAX},
        {"thinking": {"type": "enabled", "budget_tokens": 3000}, **MAX},
    ),
    # a header turning reasoning on leaves the body's thinking that is on
    (
        {**PROFILE, "X-Reasoning-Enabled": "true"},
        ADAPTIVE,
        {**ADAPTIVE, "output_config": {"effort": "low"}},
    ),
    # a header for the setting itself still wins
    (
        {"X-Reasoning-Effort": "high"},
        {**ADAPTIVE, **MAX},
        {**ADAPTIVE, "output_config": {"effort": "high"}},
    ),
    (
        {"X-Reasoning-Enabled": "false"},
        {**BUDGET, **MAX},
        {"thinking": {"type": "disabled"}, **MAX},
    ),
    # no header: the body's own parameters beat the profile's and the route's
    (PROFILE, {**ADAPTIVE, **MAX}, {**ADAPTIVE, **MAX}),
]


@pytest.mark.parametrize(("headers", "body", "sent"), CASES)
def test_a_header_replaces_the_body_parameter_of_its_setting_only(
    served: tuple[FakeUpstream, ProxyServer],
    headers: dict[str, str],
    body: dict[str, Any],
    sent: dict[str, Any],
) -> None:
    assert send(served, headers, **body) == sent
