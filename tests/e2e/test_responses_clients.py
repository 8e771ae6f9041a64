"""Real Responses clients against the real `reasoning-proxy demo` (a
subprocess): every demo model, streamed and whole, through `/v1/responses`,
each event checked against the openai SDK's models; and the Agents SDK
running a function-tool loop on the Kimi simulator, which refuses a
tool-call turn that comes back without its reasoning."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.demo.wire import MODELS
from tests.casefiles import WEATHER_RESPONSES_TOOL
from tests.harness import DEMO_RECALLS, only_conversation_turns, running_demo

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
QUESTION = "What is 17 * 23?"
WEATHER_TOOL: Any = WEATHER_RESPONSES_TOOL


REPO = Path(__file__).resolve().parents[2]


@dataclass
class Demo:
    base: str


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """`python -m proxy demo` on a free port, streams without delays."""
    with running_demo(tmp_path_factory.mktemp("demo") / "output.txt") as base:
        yield Demo(base)


def sdk(demo: Demo) -> openai.OpenAI:
    return openai.OpenAI(base_url=demo.base + "/v1", api_key="demo", max_retries=0)


def streamed(demo: Demo, body: dict[str, Any]) -> list[Any]:
    """The events of a streamed request, each validated by the SDK's model."""
    events = []
    with httpx.stream(
        "POST",
        demo.base + "/v1/responses",
        json={**body, "stream": True},
        headers={"Authorization": "Bearer demo"},
        timeout=30,
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(EVENTS.validate_json(line[len("data: ") :]))
    return events


@pytest.mark.parametrize("model", list(MODELS))
def test_every_demo_model_streams_reasoning_apart_from_the_answer(demo: Demo, model: str) -> None:
    events = streamed(demo, {"model": model, "input": QUESTION})
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert "391" in text
    assert "17 * 23" in summary
    assert "<think>" not in text + summary
    assert "</think>" not in text + summary
    final = events[-1].response
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output_text == text


@pytest.mark.parametrize("model", list(MODELS))
def test_every_demo_model_answers_whole(demo: Demo, model: str) -> None:
    with sdk(demo) as client:
        response = client.responses.create(
            model=model, input=QUESTION, include=["reasoning.encrypted_content"]
        )
    assert response.status == "completed"
    assert "391" in response.output_text
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert "17 * 23" in reasoning.summary[0].text
    assert (reasoning.encrypted_content or "").startswith("rp1.")
    assert response.usage is not None


def kimi_loop(demo: Demo, *, keep_reasoning: bool) -> str:
    """The Kimi simulator refuses a tool-call turn without its reasoning:
    a loop that completes shows the proxy sent it back."""
    with sdk(demo) as client:
        first = client.responses.create(
            model="demo-kimi",
            input="What is the weather in Oslo?",
            tools=[WEATHER_TOOL],
            store=False,
            include=["reasoning.encrypted_content"],
        )
        call = next(i for i in first.output if i.type == "function_call")
        assert call.name == "get_weather"
        items: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
        items += [
            i.model_dump(exclude_none=True)
            for i in first.output
            if keep_reasoning or i.type != "reasoning"
        ]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "-3 C"})
        second = client.responses.create(
            model="demo-kimi", input=items, tools=[WEATHER_TOOL], store=False
        )
    return second.output_text


@pytest.mark.parametrize("keep_reasoning", [True, False])
def test_the_kimi_tool_loop_works_whether_the_client_keeps_reasoning_or_not(
    demo: Demo, keep_reasoning: bool
) -> None:
    assert "-3 C" in kimi_loop(demo, keep_reasoning=keep_reasoning)


EXEC_TOOL: Any = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
}


def codex_session(
    demo: Demo,
    key: str,
    prompts: list[str],
    *,
    keep_reasoning: bool,
    model: str = "demo-kimi",
    thoughts: list[str] | None = None,
) -> list[str]:
    """Codex's loop, one prompt after another in one conversation: stateless
    (store false, the whole input each time, reasoning items carried with
    their encrypted_content), streamed, parallel tool calls allowed; every
    function_call "run" (its output is the command's last word) until a
    turn ends without one. The final texts; each turn's reasoning summary
    goes to `thoughts`."""
    items: list[Any] = []
    answers: list[str] = []
    with openai.OpenAI(base_url=demo.base + "/v1", api_key=key, max_retries=0) as client:
        for prompt in prompts:
            items.append({"type": "message", "role": "user", "content": prompt})
            for _ in range(10):
                with client.responses.stream(
                    model=model,
                    input=items,
                    tools=[EXEC_TOOL],
                    tool_choice="auto",
                    parallel_tool_calls=True,
                    store=False,
                    include=["reasoning.encrypted_content"],
                    reasoning={"summary": "auto"},
                ) as stream:
                    response = stream.get_final_response()
                assert response.status == "completed"
                if thoughts is not None:
                    thoughts += [
                        "".join(part.text for part in i.summary)
                        for i in response.output
                        if i.type == "reasoning"
                    ]
                items += [
                    i.model_dump(exclude_none=True)
                    for i in response.output
                    if keep_reasoning or i.type != "reasoning"
                ]
                calls = [i for i in response.output if i.type == "function_call"]
                if not calls:
                    answers.append(response.output_text)
                    break
                for call in calls:
                    word = str(json.loads(call.arguments)["cmd"]).split()[-1]
                    items.append(
                        {"type": "function_call_output", "call_id": call.call_id, "output": word}
                    )
    return answers


@pytest.mark.parametrize("keep_reasoning", [True, False])
def test_a_codex_session_of_tool_calls_in_a_row_and_at_once(
    demo: Demo, keep_reasoning: bool
) -> None:
    """Three commands one after another, then a follow-up with two at once
    (parallel function calls): every tool-call turn reaches Kimi with its
    reasoning (it refuses one without), from the client's encrypted_content
    or, when the client drops its reasoning items, from the store."""
    key = f"codex-session-{keep_reasoning}"
    answers = codex_session(
        demo,
        key,
        [
            "Use exec_command to run `echo one`, then `echo two`, then `echo three`",
            "Now use exec_command to run `echo alpha` and `echo beta` at once",
        ],
        keep_reasoning=keep_reasoning,
    )
    assert answers == [
        "According to exec_command: one. According to exec_command: two. "
        "According to exec_command: three.",
        "According to exec_command: alpha. According to exec_command: beta.",
    ]
    turns = only_conversation_turns(demo.base, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 1, 0, 2, 0]
    assert all(t["complete"] and t["blocks"] for t in turns)
    sent_back = [m for m in turns[-1]["egress"]["messages"] if m["toolCall"]]
    action = "passed" if keep_reasoning else "reinjected"
    assert [m["action"] for m in sent_back] == [action] * 4


@pytest.mark.parametrize("keep_reasoning", [True, False])
@pytest.mark.parametrize("model", list(MODELS))
def test_every_demo_model_runs_a_codex_session(
    demo: Demo, model: str, keep_reasoning: bool
) -> None:
    """Every simulated provider calls the function the user names, one call
    per turn and two at once; on tool-call turns the reasoning goes back to
    the upstreams whose dialect needs it, in the dialect's own shape, from
    the client's encrypted_content or, when it drops its reasoning items,
    from the store."""
    key = f"codex-every-{model}-{keep_reasoning}"
    thoughts: list[str] = []
    answers = codex_session(
        demo,
        key,
        [
            "Use exec_command to run `echo one`, then `echo two`, and tell me both outputs.",
            "Now use exec_command to run `echo alpha` and `echo beta` in parallel",
        ],
        keep_reasoning=keep_reasoning,
        model=model,
        thoughts=thoughts,
    )
    assert answers == [
        "According to exec_command: one. According to exec_command: two.",
        "According to exec_command: alpha. According to exec_command: beta.",
    ]
    recalled = "My earlier reasoning is back in the context"
    said = recalled if model in DEMO_RECALLS else "My earlier reasoning is not in the context"
    after_tools = [thoughts[i] for i in (1, 2, 4)]
    assert all(t.startswith(said) for t in after_tools), after_tools
    turns = only_conversation_turns(demo.base, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 0, 2, 0]
    sent_back = [m["action"] for m in turns[-1]["egress"]["messages"] if m["toolCall"]]
    kept = "passed" if keep_reasoning else "reinjected"
    action = kept if model in DEMO_RECALLS else "stripped"
    assert sent_back == [action] * 3


@pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI is not installed")
def test_codex_runs_a_session_of_tool_calls(demo: Demo, tmp_path: Path) -> None:
    """`codex exec` runs two commands in a row, then `codex exec resume
    --last` runs two at once in the same conversation: Kimi gets every
    tool-call turn's reasoning back (it refuses one without). The commands
    are fixed echoes from the simulator, run without Codex's sandbox (which
    needs user namespaces a CI container may not have)."""
    key = "codex-cli-session"
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        'model = "demo-kimi"\n'
        'model_provider = "rp"\n'
        "[model_providers.rp]\n"
        'name = "reasoning-proxy demo"\n'
        f'base_url = "{demo.base}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "RP_TEST_KEY"\n'
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "CODEX_HOME": str(home),
        "RP_TEST_KEY": key,
    }
    outputs = []
    for command, prompt in (
        (["exec"], "Use exec_command to run `echo first-one`, then `echo first-two`"),
        (
            ["exec", "resume", "--last"],
            "Use exec_command to run `echo then-a` and `echo then-b` at once",
        ),
    ):
        done = subprocess.run(
            [
                "codex",
                *command,
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                prompt,
            ],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout.strip())
    assert outputs == [
        "According to exec_command: first-one. According to exec_command: first-two.",
        "According to exec_command: then-a. According to exec_command: then-b.",
    ]
    turns = only_conversation_turns(demo.base, key)
    assert [len(t["toolCalls"]) for t in turns] == [1, 1, 0, 2, 0]
    assert all(t["complete"] for t in turns)


@pytest.mark.parametrize("chained", [False, True])
def test_the_agents_sdk_runs_a_tool_loop(demo: Demo, chained: bool) -> None:
    """`chained`: the SDK sends previous_response_id and only the new items
    (the proxy's stored responses); otherwise store off, every item resent."""
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"18 C and sunny in {city}"

    async def run() -> Any:
        client = openai.AsyncOpenAI(base_url=demo.base + "/v1", api_key="demo", max_retries=0)
        try:
            settings = ModelSettings(
                store=chained, response_include=["reasoning.encrypted_content"]
            )
            agent = Agent(
                name="weather",
                instructions="Answer with the tool.",
                tools=[get_weather],
                model=OpenAIResponsesModel(model="demo-kimi", openai_client=client),
                model_settings=settings,
            )
            return await Runner.run(
                agent,
                "What is the weather in Paris?",
                run_config=RunConfig(tracing_disabled=True),
                auto_previous_response_id=chained,
            )
        finally:
            await client.close()

    result = asyncio.run(run())
    assert calls == ["Paris"]
    assert "18 C and sunny in Paris" in result.final_output
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds == [
        "ReasoningItem",
        "ToolCallItem",
        "ToolCallOutputItem",
        "ReasoningItem",
        "MessageOutputItem",
    ]


SECTION = (REPO / "README.md").read_text(encoding="utf-8").split("## Responses API / Codex")[1]
SECTION = SECTION.split("\n## ")[0]


def test_the_readmes_sdk_snippet_runs_against_the_demo(demo: Demo) -> None:
    code = SECTION.split("```python\n")[1].split("```")[0]
    code = code.replace("http://127.0.0.1:8787", demo.base)
    printed: list[str] = []
    namespace: dict[str, Any] = {"print": lambda *a: printed.append(" ".join(map(str, a)))}
    exec(code, namespace)
    namespace["client"].close()
    assert len(printed) == 2
    assert "17 * 23" in printed[0]
    assert printed[1] == "17 * 23 = 391."


def test_the_readmes_codex_config_names_the_responses_wire() -> None:
    config = tomllib.loads(SECTION.split("```toml\n")[1].split("```")[0])
    provider = config["model_providers"][config["model_provider"]]
    assert provider["wire_api"] == "responses"
    assert provider["base_url"] == "http://127.0.0.1:8787/v1"
    assert config["model"] in MODELS
