"""The README's usage snippets, run as written against the demo started as
the README says, so none of them can rot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import running_demo

REPO = Path(__file__).parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
QUICK_START = README[README.index("## Quick start") : README.index("## Use it")]
USE_IT = README[README.index("## Use it") : README.index("## Request headers")]
HEADERS = README[README.index("## Request headers") : README.index("Precedence, lowest")]
PROFILES = README[
    README.index("### `defaults`, `profiles` and `reasoning`") : README.index("### Environment")
]
BIN = Path(sys.executable).parent


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    command = shutil.which("reasoning-proxy", path=str(BIN))
    assert command, "the console script is installed with the package"
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    # the README's snippets run against the demo as a user starts it
    with running_demo(log, command=[command], fast=False) as base:
        yield int(base.rsplit(":", 1)[1])


def on(port: int, snippet: str) -> str:
    assert "127.0.0.1:8787" in snippet
    return snippet.replace("127.0.0.1:8787", f"127.0.0.1:{port}")


def test_the_python_snippet_streams_reasoning_then_the_answer(port: int) -> None:
    (snippet,) = blocks(USE_IT, "python")
    result = subprocess.run(
        [sys.executable, "-c", on(port, snippet)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    # the reasoning, a blank line, then the answer on a line of its own
    reasoning, answer = result.stdout.rstrip("\n").split("\n\n")
    assert "12 * 12" in reasoning
    assert answer == "12 * 12 = 144."
    assert "<think>" not in result.stdout
    # the conversation it named is stored, with its reasoning
    curl = re.search(r"Stored reasoning: `(curl [^`]+)`", USE_IT)
    assert curl is not None
    stored = subprocess.run(
        ["bash", "-c", on(port, curl.group(1))], capture_output=True, text=True, timeout=60
    )
    turn = json.loads(stored.stdout)["turns"][0]
    assert turn["blocks"][0]["thought"]
    assert "144" in turn["content"]


def test_the_curl_snippet(port: int) -> None:
    (snippet,) = blocks(USE_IT, "sh")
    result = subprocess.run(
        ["bash", "-c", on(port, snippet)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    events = [line[6:] for line in result.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1] if '"choices"' in e]
    assert "".join(d.get("reasoning_content") or "" for d in deltas)
    assert "Paris" in "".join(d.get("content") or "" for d in deltas)


def test_the_check_config_line_runs_as_written(tmp_path: Path) -> None:
    # a newcomer's shell: the venv's scripts on the PATH, no provider key exported
    (line,) = [
        line.split("#")[0]
        for block in blocks(QUICK_START, "sh")
        for line in block.splitlines()
        if "check-config config/" in line
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("REASONING_PROXY_") and not k.endswith("_API_KEY")
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    # the repository's files, as in a fresh clone
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith(": OK")
    (route,) = json.loads(result.stdout)["routes"]
    assert route["api_key"] == "<set>"


def test_every_python_snippet_says_how_to_install_what_it_imports() -> None:
    # `pip install .` brings the proxy, not the clients the snippets use
    installed = " ".join(
        m.replace("\n", " ") for m in re.findall(r"`[^`]*pip install\s([^`]+)`", README)
    ).split()
    for snippet in blocks(README, "python"):
        for module in re.findall(r"^(?:from|import) (\w+)", snippet, re.M):
            assert module in installed, module


def test_the_profile_snippet_writes_a_profile_requests_then_pick(tmp_path: Path) -> None:
    (snippet,) = blocks(PROFILES, "sh")
    token = "admin-token-of-the-readme-test"
    with running_demo(
        tmp_path / "demo.log", environ={"REASONING_PROXY_ADMIN_TOKEN": token}
    ) as base:
        port = int(base.rsplit(":", 1)[1])
        result = subprocess.run(
            ["bash", "-c", on(port, snippet)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "REASONING_PROXY_ADMIN_TOKEN": token},
        )
        assert result.returncode == 0, result.stderr
        written = json.loads(result.stdout)
        name = written["name"]
        assert written["source"] == "store"
        assert f"X-Reasoning-Profile: {name}" in PROFILES
        listed = httpx.get(f"{base}/v1/reasoning/profiles", timeout=30).json()["data"]
        assert [p["name"] for p in listed] == [name]
        answer = httpx.post(
            f"{base}/v1/chat/completions",
            headers={"X-Reasoning-Profile": name},
            json={"model": "demo-deepseek", "messages": [{"role": "user", "content": "12 * 12?"}]},
            timeout=30,
        ).json()
    message = answer["choices"][0]["message"]
    assert message["content"]
    assert "reasoning_content" not in message  # the profile's include_in_response: false


def test_header_values_are_case_insensitive_except_names(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    body = {"model": "demo-deepseek", "messages": [{"role": "user", "content": "12 * 12?"}]}
    rows = [line.split("|")[1:-1] for line in HEADERS.splitlines() if line.startswith("| `X-")]
    named = []
    for header, values, _default in rows:
        choices = re.findall(r"`([a-zA-Z_]+)`", values)
        if not choices:  # an integer, or a name
            named.append(header.strip(" `"))
            continue
        for value in choices:
            r = httpx.post(
                f"{base}/v1/chat/completions",
                headers={header.strip(" `"): value.upper()},
                json=body,
                timeout=30,
            )
            assert r.status_code == 200, (header, value, r.text)
    assert named == ["X-Reasoning-Max-Tokens", "X-Reasoning-Profile", "X-Conversation-Id"]
    assert "a profile name and a conversation\nid are matched as written" in HEADERS
    # a conversation id is matched as written
    r = httpx.post(
        f"{base}/v1/chat/completions",
        headers={"X-Conversation-Id": "Readme-Case"},
        json=body,
        timeout=30,
    )
    assert r.status_code == 200
    assert httpx.get(f"{base}/v1/conversations/Readme-Case", timeout=30).status_code == 200
    assert httpx.get(f"{base}/v1/conversations/readme-case", timeout=30).status_code == 404
