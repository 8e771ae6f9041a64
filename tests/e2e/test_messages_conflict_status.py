"""A 409 from a Chat upstream reaches an Anthropic client as Anthropic says
it: `conflict_error`, the SDK's ConflictError."""

from __future__ import annotations

import anthropic
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.messages_wire import sdk_client


def test_a_409_is_a_conflict_error(upstream: FakeUpstream) -> None:
    upstream.script(
        Json({"error": {"message": "busy with another", "type": "conflict"}}, status=409)
    )
    with (
        running_proxy(route_config(upstream)) as proxy,
        pytest.raises(anthropic.ConflictError) as caught,
    ):
        sdk_client(proxy.base, "sk-ant-test").messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "conflict_error", "message": "busy with another"},
    }
