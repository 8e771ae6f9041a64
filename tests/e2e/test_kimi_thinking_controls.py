"""Kimi's thinking controls per model, through the real proxy and the openai
SDK: kimi-k2.7-code always thinks and refuses `thinking: {"type":
"disabled"}` with an error, so the off switch is not sent there and the
response names it in X-Reasoning-Ignored (kimi-k2.5 and kimi-k2.6 still get
it); kimi-k3 takes a top-level `reasoning_effort` of low, high or max and
cannot be switched off. Kimi Code's host, api.kimi.com, is a Kimi upstream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, running_proxy

ROOT = Path(__file__).resolve().parents[2]
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "kimi",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "reasoning_content": "Hm.", "content": "Hi."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3},
}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeUpstream, ProxyServer]]:
    upstream = FakeUpstream().start()
    route = {"name": "kimi", "models": ["*"], "upstream": upstream.url, "dialect": "kimi"}
    try:
        with running_proxy({"routes": [route]}) as proxy:
            yield upstream, proxy
    finally:
        upstream.stop()


def ask(
    served: tuple[FakeUpstream, ProxyServer], model: str, headers: dict[str, str]
) -> tuple[dict[str, Any], str | None]:
    """The body the upstream got, and the response's X-Reasoning-Ignored."""
    upstream, proxy = served
    upstream.reset()
    upstream.script(Json(ANSWER))
    with openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers=headers,
        )
    assert raw.parse().choices[0].message.content == "Hi."
    return upstream.chat_requests()[-1].json, raw.headers.get("x-reasoning-ignored")


OFF = {"X-Reasoning-Enabled": "false"}
NONE = {"X-Reasoning-Effort": "none"}
DISABLED = {"type": "disabled"}


@pytest.mark.parametrize(
    ("model", "headers", "ignored"),
    [
        ("kimi-k2.7-code", OFF, "enabled"),
        ("kimi-k2.7-code-highspeed", OFF, "enabled"),
        ("kimi-k2.7-code", NONE, "effort"),
    ],
)
def test_the_always_thinking_code_model_gets_no_off_switch(
    served: tuple[FakeUpstream, ProxyServer], model: str, headers: dict[str, str], ignored: str
) -> None:
    body, named = ask(served, model, headers)
    assert "thinking" not in body
    assert "reasoning_effort" not in body
    assert named == ignored


@pytest.mark.parametrize("model", ["kimi-k2.6", "kimi-k2.5"])
def test_the_models_that_can_stop_thinking_still_get_the_switch(
    served: tuple[FakeUpstream, ProxyServer], model: str
) -> None:
    for headers in (OFF, NONE):
        body, named = ask(served, model, headers)
        assert body["thinking"] == DISABLED
        assert named is None


@pytest.mark.parametrize(
    ("model", "effort", "sent"),
    [
        ("kimi-k3", "low", "low"),
        ("kimi-k3", "minimal", "low"),
        ("kimi-k3", "medium", "high"),  # a tie goes up
        ("kimi-k3", "high", "high"),
        ("kimi-k3", "xhigh", "max"),  # the settings' top effort reaches Kimi's max
        ("kimi-k3.1-pro", "high", "high"),
    ],
)
def test_k3_takes_its_three_efforts(
    served: tuple[FakeUpstream, ProxyServer], model: str, effort: str, sent: str
) -> None:
    body, named = ask(served, model, {"X-Reasoning-Effort": effort})
    assert body["reasoning_effort"] == sent
    assert "thinking" not in body
    assert named is None


def test_k3_cannot_be_switched_off_nor_given_a_budget(
    served: tuple[FakeUpstream, ProxyServer],
) -> None:
    body, named = ask(served, "kimi-k3", {**OFF, "X-Reasoning-Effort": "high"})
    assert ("thinking" in body, "reasoning_effort" in body, named) == (False, False, "enabled")
    body, named = ask(served, "kimi-k3", {"X-Reasoning-Max-Tokens": "500"})
    assert ("reasoning_effort" in body, named) == (False, "max_tokens")


def test_kimi_codes_host_is_a_kimi_upstream(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "routes:\n  - name: code\n    models: ['*']\n    upstream: https://api.kimi.com/coding/v1\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(config)],
        env={**env, "REASONING_PROXY_SECRET": "test-secret"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    route = json.loads(done.stdout)["routes"][0]
    assert route["dialect"] == "kimi"
    assert route["dialect_detection"] == "from the upstream host api.kimi.com (kimi)"
