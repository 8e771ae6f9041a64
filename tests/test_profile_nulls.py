"""`PUT /v1/reasoning/profiles/{name}` with `null` for a setting that has no
unset state (`{"output": null}` used to be answered 200, and the profile
then gave the reasoning_details shape). Through a real socket: the 400 the
client sees, and nothing stored; a profile stored with such a null before
still serves, the null read as unset."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy

ADMIN = "admin-token-for-null-tests"


@pytest.fixture(scope="module")
def upstream_module() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream().start()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def proxy(upstream_module: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(
        route_config(upstream_module), env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN}
    ) as server:
        yield server


def put(proxy: ProxyServer, name: str, body: object) -> httpx.Response:
    return httpx.put(
        f"{proxy.url}/reasoning/profiles/{name}",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN}"},
    )


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("output", "reasoning_content, reasoning, think_tags, reasoning_details, none"),
        ("format", "field, native"),
        ("strip_from_context", "all, allButLast, none"),
        ("stripFromContext", "all, allButLast, none"),
        ("enabled", "true, false"),
        ("include_in_context", "auto, true, false"),
    ],
)
def test_null_is_a_400_for_a_setting_without_an_unset_state(
    proxy: ProxyServer, key: str, allowed: str
) -> None:
    for body in ({key: None}, {"settings": {key: None}}):
        answer = put(proxy, "nulls", body)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "invalid_reasoning_setting"
        assert error["param"] == key
        assert error["message"] == (
            f"settings.{key} cannot be null (leave it out to not set it); "
            f"it must be one of: {allowed}"
        )
    assert httpx.get(f"{proxy.url}/reasoning/profiles/nulls").status_code == 404


def test_null_unsets_effort_in_a_stored_profile(proxy: ProxyServer) -> None:
    answer = put(proxy, "no-effort", {"effort": None, "max_tokens": None})
    assert answer.status_code == 200
    assert answer.json()["settings"] == {"effort": None, "max_tokens": None}


def test_a_profile_stored_with_a_null_before_serves_with_it_unset(
    proxy: ProxyServer, upstream_module: FakeUpstream
) -> None:
    upstream_module.reset()
    upstream_module.script(
        Json(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "4",
                            "reasoning_content": "Sum.",
                        },
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    # as an earlier version stored `PUT {"output": null}` (the memory store
    # keeps no loop state, so it is written from here)
    asyncio.run(proxy.runtime.store.put_profile("old", {"output": None, "effort": "low"}))
    answer = httpx.post(
        f"{proxy.url}/chat/completions",
        headers={"Authorization": "Bearer sk-a", "X-Reasoning-Profile": "old"},
        json={"model": "m", "messages": [{"role": "user", "content": "2+2?"}]},
    )
    assert answer.status_code == 200, answer.text
    message = answer.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "Sum."  # the default shape, not reasoning_details
    assert upstream_module.chat_requests()[0].json["reasoning_effort"] == "low"
