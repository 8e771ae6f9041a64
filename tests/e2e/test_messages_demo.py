"""The Messages door against the demo's simulated upstreams (`reasoning-proxy
demo`, served in-process on a real socket), with the anthropic SDK: create,
streamed and not; the stream helper; a tool loop that keeps thinking and one
that drops it; and, where Claude Code is installed, `claude -p`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import uvicorn

from proxy.app import create_app
from proxy.demo.run import DEMO_ROUTES, MOUNT, build_demo_config
from proxy.demo.simulator import Simulator
from tests.harness import DEMO_RECALLS, free_port, only_conversation_turns
from tests.messages_wire import accumulate, parse_events

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
RECALLED = "My earlier reasoning is back in the context"


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    """The demo (proxy + simulator) on a free port; its base URL."""
    port = free_port()
    config = build_demo_config("127.0.0.1", port, env={"REASONING_PROXY_SECRET": "demo-test"})
    app = create_app(config, mounts={MOUNT: Simulator(delay=0)})
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "the demo did not start"
        assert thread.is_alive(), "the demo did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture
def sdk(demo: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=demo, api_key="demo-key", max_retries=0) as client:
        yield client


QUESTION: list[Any] = [{"role": "user", "content": "What is 17 * 23?"}]


@pytest.mark.parametrize("model", ["demo-deepseek", "demo-openrouter", "demo-minimax", "demo-qwen"])
def test_create_not_streamed(sdk: anthropic.Anthropic, model: str) -> None:
    message = sdk.messages.create(
        model=model, max_tokens=500, messages=QUESTION, thinking={"type": "adaptive"}
    )
    assert [b.type for b in message.content] == ["thinking", "text"]
    thinking, text = message.content
    assert thinking.type == "thinking"
    assert "17 * 23 = 391" in thinking.thinking
    assert thinking.signature.startswith("rp1.")
    assert text.type == "text"
    assert text.text == "17 * 23 = 391."
    assert "<think>" not in text.text
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0


@pytest.mark.parametrize("model", ["demo-deepseek", "demo-vllm", "demo-groq", "demo-kimi"])
def test_create_streamed(demo: str, model: str) -> None:
    body = {"model": model, "max_tokens": 500, "stream": True, "messages": QUESTION}
    r = httpx.post(f"{demo}/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=30)
    assert r.status_code == 200
    message = accumulate(parse_events(r.content))  # each event validated by the SDK's types
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[1].text == "17 * 23 = 391."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"


def test_the_sdk_stream_and_its_helper(sdk: anthropic.Anthropic) -> None:
    events = list(
        sdk.messages.create(model="demo-deepseek", max_tokens=500, messages=QUESTION, stream=True)
    )
    assert events[0].type == "message_start"
    assert events[-1].type == "message_stop"
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta"}
    with sdk.messages.stream(model="demo-deepseek", max_tokens=500, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "17 * 23 = 391."
    assert final.content[0].type == "thinking"


def test_thinking_disabled_means_no_thinking_block(sdk: anthropic.Anthropic) -> None:
    message = sdk.messages.create(
        model="demo-deepseek", max_tokens=500, messages=QUESTION, thinking={"type": "disabled"}
    )
    assert [b.type for b in message.content] == ["text"]


def tool_loop(sdk: anthropic.Anthropic, *, keep_thinking: bool, city: str) -> str:
    """Ask demo-kimi (which refuses a tool-call turn without its reasoning)
    for the weather, run the tool, send the result back; the answer's thinking."""
    messages: list[Any] = [{"role": "user", "content": f"What is the weather in {city}?"}]
    with sdk.messages.stream(
        model="demo-kimi",
        max_tokens=500,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
        thinking={"type": "adaptive"},
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather"
    assert call.input == {"city": city}
    content = [b.model_dump() for b in first.content if keep_thinking or b.type != "thinking"]
    messages += [
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}],
        },
    ]
    second = sdk.messages.create(
        model="demo-kimi",
        max_tokens=500,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
        thinking={"type": "adaptive"},
    )
    assert second.stop_reason == "end_turn"
    assert second.content[-1].text == "According to get_weather: sunny, 21 C."  # type: ignore[union-attr]
    thinking = second.content[0]
    assert thinking.type == "thinking"
    return thinking.thinking


def test_a_tool_loop_that_keeps_thinking(sdk: anthropic.Anthropic) -> None:
    assert RECALLED in tool_loop(sdk, keep_thinking=True, city="Paris")


def test_a_tool_loop_that_drops_thinking(sdk: anthropic.Anthropic) -> None:
    # the client drops its thinking blocks; the store supplies the reasoning
    # (Kimi would refuse the turn without it)
    assert RECALLED in tool_loop(sdk, keep_thinking=False, city="Lyon")


BASH = {
    "name": "Bash",
    "description": "Runs a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
}


def agent_session(
    sdk: anthropic.Anthropic,
    prompts: list[str],
    *,
    keep_thinking: bool,
    model: str = "demo-kimi",
    thoughts: list[str] | None = None,
) -> tuple[list[str], list[int]]:
    """Claude Code's loop, one prompt after another in one conversation: each
    turn streamed, every tool_use "run" (its result is the command's last
    word), the results sent back in the order the commands finished (the
    last first), until end_turn. The final texts, and the requests per prompt;
    every turn's thinking goes to `thoughts`."""
    messages: list[Any] = []
    answers: list[str] = []
    requests: list[int] = []
    for prompt in prompts:
        messages.append({"role": "user", "content": prompt})
        for sent in range(1, 10):
            with sdk.messages.stream(
                model=model,
                max_tokens=2000,
                messages=messages,
                tools=[BASH],  # type: ignore[list-item]
                thinking={"type": "adaptive"},
            ) as stream:
                turn = stream.get_final_message()
            if thoughts is not None:
                thoughts += [b.thinking for b in turn.content if b.type == "thinking"]
            kept = [b for b in turn.content if keep_thinking or b.type != "thinking"]
            messages.append({"role": "assistant", "content": [b.model_dump() for b in kept]})
            if turn.stop_reason == "end_turn":
                answers.append(turn.content[-1].text)  # type: ignore[union-attr]
                requests.append(sent)
                break
            assert turn.stop_reason == "tool_use"
            uses = [b for b in turn.content if b.type == "tool_use"]
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": str(use.input["command"]).split()[-1],  # type: ignore[index]
                }
                for use in reversed(uses)
            ]
            messages.append({"role": "user", "content": results})
    return answers, requests


@pytest.mark.parametrize("keep_thinking", [True, False])
def test_a_session_of_tool_calls_in_a_row_and_at_once(
    demo: str, sdk: anthropic.Anthropic, keep_thinking: bool
) -> None:
    """Three commands one after another, then a follow-up with two at once
    (parallel tool_use blocks): every tool-call turn reaches Kimi with its
    reasoning (it refuses one without), from the client's thinking blocks or,
    when the client drops them, from the store; every turn is stored."""
    key = f"session-{keep_thinking}"
    with anthropic.Anthropic(base_url=demo, api_key=key, max_retries=0) as client:
        answers, requests = agent_session(
            client,
            [
                "Use the Bash tool to run `echo one`, then `echo two`, then `echo three`",
                "Now use the Bash tool to run `echo alpha` and `echo beta` at once",
            ],
            keep_thinking=keep_thinking,
        )
    assert answers == [
        "According to Bash: one. According to Bash: two. According to Bash: three.",
        "According to Bash: beta. According to Bash: alpha.",
    ]
    assert requests == [4, 2]
    turns = only_conversation_turns(demo, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 1, 0, 2, 0]
    assert all(t["complete"] and t["blocks"] for t in turns)
    sent_back = [m for m in turns[-1]["egress"]["messages"] if m["toolCall"]]
    action = "passed" if keep_thinking else "reinjected"
    assert [m["action"] for m in sent_back] == [action] * 4


@pytest.mark.parametrize("keep_thinking", [True, False])
@pytest.mark.parametrize("model", sorted(DEMO_ROUTES))
def test_every_demo_model_runs_a_session_of_tool_calls(
    demo: str, model: str, keep_thinking: bool
) -> None:
    """Every simulated provider calls the tool the user names, one call per
    turn and two at once; on tool-call turns the reasoning goes back to the
    upstreams whose dialect needs it, in the dialect's own shape (MiniMax's
    `<think>` in content, OpenRouter's reasoning_details), from the client's
    thinking blocks or, when it drops them, from the store."""
    key = f"every-{model}-{keep_thinking}"
    thoughts: list[str] = []
    with anthropic.Anthropic(base_url=demo, api_key=key, max_retries=0) as client:
        answers, requests = agent_session(
            client,
            [
                "Run `echo one` with Bash, then `echo two`, then tell me both outputs.",
                "Now use the Bash tool to run `echo alpha` and `echo beta` in parallel",
            ],
            keep_thinking=keep_thinking,
            model=model,
            thoughts=thoughts,
        )
    assert answers == [
        "According to Bash: one. According to Bash: two.",
        "According to Bash: beta. According to Bash: alpha.",
    ]
    assert requests == [3, 2]
    after_tools = [thoughts[i] for i in (1, 2, 4)]
    said = RECALLED if model in DEMO_RECALLS else "My earlier reasoning is not in the context"
    assert all(t.startswith(said) for t in after_tools), after_tools
    turns = only_conversation_turns(demo, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 0, 2, 0]
    sent_back = [m["action"] for m in turns[-1]["egress"]["messages"] if m["toolCall"]]
    kept = "passed" if keep_thinking else "reinjected"
    action = kept if model in DEMO_RECALLS else "stripped"
    assert sent_back == [action] * 3


def test_count_tokens(sdk: anthropic.Anthropic) -> None:
    counted = sdk.messages.count_tokens(model="demo-deepseek", messages=QUESTION)
    assert 5 < counted.input_tokens < 30


@pytest.mark.skipif(shutil.which("claude") is None, reason="Claude Code is not installed")
def test_claude_code_answers_through_the_proxy(demo: str) -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "ANTHROPIC_BASE_URL": demo,
            "ANTHROPIC_API_KEY": "demo-key",
            "ANTHROPIC_MODEL": "demo-deepseek",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": "demo-deepseek",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        done = subprocess.run(
            ["claude", "-p", "What is 17 * 23?"],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "391" in done.stdout


@pytest.mark.skipif(shutil.which("claude") is None, reason="Claude Code is not installed")
def test_claude_code_runs_a_session_of_tool_calls(demo: str) -> None:
    """`claude -p` runs two commands in a row, then `--continue` runs two at
    once (parallel tool_use blocks) in the same conversation: Kimi gets every
    tool-call turn's reasoning back (it refuses one without), and the proxy
    keeps all six turns under one conversation."""
    key = "claude-code-session"
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "ANTHROPIC_BASE_URL": demo,
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_MODEL": "demo-kimi",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": "demo-kimi",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        outputs = []
        for flags, prompt in (
            ([], "Use the Bash tool to run `echo first-one`, then `echo first-two`"),
            (["--continue"], "Use the Bash tool to run `echo then-a` and `echo then-b` at once"),
        ):
            done = subprocess.run(
                ["claude", "-p", *flags, "--allowedTools=Bash", "--", prompt],
                env=env,
                cwd=home,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            outputs.append(done.stdout.strip())
    assert outputs[0] == "According to Bash: first-one. According to Bash: first-two."
    # Claude Code sends the results in the order the commands finished
    assert outputs[1] in (
        "According to Bash: then-a. According to Bash: then-b.",
        "According to Bash: then-b. According to Bash: then-a.",
    )
    turns = only_conversation_turns(demo, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 0, 2, 0]
    assert all(t["complete"] for t in turns)


def test_the_readme_snippet(demo: str) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[
        readme.index("## Messages API / Claude Code") : readme.index("## Configuration")
    ]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert "http://127.0.0.1:8787" in snippet
    done = subprocess.run(
        [sys.executable, "-c", snippet.replace("http://127.0.0.1:8787", demo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    thinking, answer = done.stdout.strip().splitlines()[-2:]
    assert "17 * 23 = 391" in thinking
    assert answer == "17 * 23 = 391."
