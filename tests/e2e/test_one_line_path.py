"""The one-line path: `reasoning-proxy serve --upstream URL` with no config
file, in front of the demo's simulator run on its own
(`reasoning-proxy demo --simulator-only`). Both are real processes on free
ports; the client is the official openai SDK doing a Kimi tool loop that
drops the reasoning, as most clients do. The dialect comes from the model
name (demo-kimi), and `include_in_context: auto` sends the reasoning back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.casefiles import WEATHER_CHAT_TOOL
from tests.harness import free_port, stop
from tests.stores.servers import ProxyProcess, wait_until

KIMI_400 = "thinking is enabled but reasoning_content is missing in assistant tool call message"
WEATHER: Any = WEATHER_CHAT_TOOL


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/models", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    port = free_port()
    output = tmp_path_factory.mktemp("simulator") / "output.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    env["REASONING_PROXY_DEMO_DELAY_MS"] = "0"
    command = [sys.executable, "-m", "proxy", "demo", "--simulator-only", "--port", str(port)]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until(
            lambda: _answers(url) or process.poll() is not None,
            timeout=30,
            what="the simulator to start",
        )
        if process.poll() is not None:
            pytest.fail("the simulator exited:\n" + output.read_text())
        yield url, output
    finally:
        stop(process)


def kimi_tool_loop(client: openai.OpenAI) -> tuple[str, str]:
    """Ask, run the tool, send the history back as the SDK's users build it
    (content and tool calls, no reasoning); the final answer and its reasoning."""
    question: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="demo-kimi", messages=question, tools=[WEATHER])
    message = first.choices[0].message
    assert message.tool_calls, "the simulated Kimi calls the tool"
    assert (message.model_extra or {}).get("reasoning_content")  # it did reason
    call = message.tool_calls[0]
    assert call.type == "function"
    assistant: Any = {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        ],
    }
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    result: Any = {"role": "tool", "tool_call_id": call.id, "content": "18°C, sunny"}
    final = client.chat.completions.create(
        model="demo-kimi", messages=[*question, assistant, result], tools=[WEATHER]
    )
    reply = final.choices[0].message
    return reply.content or "", (reply.model_extra or {}).get("reasoning_content") or ""


def client_for(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="sk-anything", max_retries=0)


def test_the_simulator_says_how_to_put_the_proxy_in_front(
    simulator: tuple[str, Path],
) -> None:
    url, output = simulator
    text = output.read_text()
    assert "SIMULATED" in text
    assert f"reasoning-proxy serve --upstream {url}" in text


def test_the_loop_fails_against_the_simulator_directly(simulator: tuple[str, Path]) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        kimi_tool_loop(client_for(simulator[0]))
    assert refused.value.status_code == 400
    assert KIMI_400 in str(refused.value)


def test_serve_upstream_alone_carries_a_kimi_tool_loop(
    simulator: tuple[str, Path], tmp_path: Path
) -> None:
    proxy = ProxyProcess(["--upstream", simulator[0]], log=tmp_path / "proxy.log").start()
    try:
        answer, reasoning = kimi_tool_loop(client_for(proxy.url))
        listed = client_for(proxy.url).models.list()  # pass-through reaches the simulator
        raw = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "demo-kimi", "messages": [{"role": "user", "content": "hi"}]},
        )
    finally:
        proxy.stop()
    assert answer == "According to get_weather: 18°C, sunny."
    assert "My earlier reasoning is back in the context" in reasoning
    assert "demo-kimi" in {m.id for m in listed.data}
    assert raw.headers["x-reasoning-dialect"] == "kimi"


def test_dialect_openai_forced_on_the_command_line_loses_the_reasoning(
    simulator: tuple[str, Path], tmp_path: Path
) -> None:
    args = ["--upstream", simulator[0], "--dialect", "openai"]
    proxy = ProxyProcess(args, log=tmp_path / "proxy.log").start()
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            kimi_tool_loop(client_for(proxy.url))
    finally:
        proxy.stop()
    assert refused.value.status_code == 400
    assert KIMI_400 in str(refused.value)


@pytest.mark.parametrize("implicit", [False, True])
def test_implicit_open_tag_on_the_command_line_splits_a_template_opened_think(
    simulator: tuple[str, Path], tmp_path: Path, implicit: bool
) -> None:
    """demo-qwen answers as a model whose prompt template opened `<think>`:
    its reply starts inside the reasoning and carries only `</think>`.
    Without the flag that reasoning stays in the answer (the lone delimiter
    removed); with `--implicit-open-tag` it is split off, streamed or not."""
    args = ["--upstream", simulator[0], *(["--implicit-open-tag"] if implicit else [])]
    proxy = ProxyProcess(args, log=tmp_path / "proxy.log").start()
    try:
        client = client_for(proxy.url)
        question = [{"role": "user", "content": "What is 17 * 23?"}]
        whole = client.chat.completions.create(model="demo-qwen", messages=question)  # type: ignore[arg-type]
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model="demo-qwen",
                messages=question,  # type: ignore[arg-type]
                stream=True,
            )
            if chunk.choices
        )
    finally:
        proxy.stop()
    answer = whole.choices[0].message.content or ""
    reasoning = getattr(whole.choices[0].message, "reasoning_content", None)
    assert "</think>" not in answer
    assert "391" in answer
    if implicit:
        assert reasoning
        assert reasoning not in answer
        assert streamed.strip() == answer.strip()
    else:
        assert reasoning is None
        assert len(answer) > len("17 * 23 = 391.") + 20  # the reasoning came with it
