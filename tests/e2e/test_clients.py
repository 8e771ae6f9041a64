"""Where each client puts the reasoning (the README's table under "Use it"):
each client runs as a script of its own against `reasoning-proxy demo`,
started as a user would, and prints what it found where."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import running_demo

REPO = Path(__file__).parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
QUESTION = "What is 17 * 23?"
ANSWER = "17 * 23 = 391."


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    command = shutil.which("reasoning-proxy", path=str(Path(sys.executable).parent))
    assert command, "the console script is installed with the package"
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    with running_demo(log, command=[command]) as base:
        yield base + "/v1"


def run(base: str, script: str) -> dict[str, str]:
    """Run a client script (BASE and QUESTION set); it prints one JSON object."""
    env = {
        **os.environ,
        # litellm: no download of its price list at import
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONWARNINGS": "ignore",
    }
    prelude = f"BASE = {base!r}\nQUESTION = {QUESTION!r}\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def test_the_readme_names_every_client() -> None:
    table = README[README.index("| client | where the reasoning shows up |") :]
    table = table[: table.index("\n\n")]
    for name in ("curl", "`openai` for Python", "`openai` for Node", "`ChatOpenAI`"):
        assert name in table
    for name in ("`ChatDeepSeek`", "litellm", "Agents SDK", "pydantic-ai", "LangGraph"):
        assert name in table


def test_openai_python_keeps_it_in_model_extra(base: str) -> None:
    found = run(
        base,
        """
        import json
        from openai import OpenAI
        client = OpenAI(base_url=BASE, api_key="demo")
        messages = [{"role": "user", "content": QUESTION}]
        reply = client.chat.completions.create(model="demo-deepseek", messages=messages)
        stream = client.chat.completions.create(
            model="demo-deepseek", messages=messages, stream=True
        )
        streamed = "".join(
            (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in stream
        )
        message = reply.choices[0].message
        print(json.dumps({"reasoning": message.model_extra["reasoning_content"],
                          "streamed": streamed, "content": message.content}))
        """,
    )
    assert "17 * 23" in found["reasoning"]
    assert found["streamed"] == found["reasoning"]
    assert found["content"] == ANSWER


def test_langchain_chat_openai_drops_it_and_chat_deepseek_keeps_it(base: str) -> None:
    found = run(
        base,
        """
        import json
        from langchain_deepseek import ChatDeepSeek
        from langchain_openai import ChatOpenAI
        question = [("user", QUESTION)]
        plain = ChatOpenAI(base_url=BASE, api_key="demo", model="demo-deepseek").invoke(question)
        tagged = ChatOpenAI(
            base_url=BASE, api_key="demo", model="demo-deepseek",
            default_headers={"X-Reasoning-Output": "think_tags"},
        ).invoke(question)
        deepseek = ChatDeepSeek(api_base=BASE, api_key="demo", model="demo-deepseek")
        message = deepseek.invoke(question)
        streamed = "".join(
            c.additional_kwargs.get("reasoning_content", "") for c in deepseek.stream(question)
        )
        print(json.dumps({
            "openai_content": plain.content,
            "openai_extra": sorted(plain.additional_kwargs),
            "openai_blocks": [b["type"] for b in plain.content_blocks],
            "openai_tagged": tagged.content,
            "deepseek_reasoning": message.additional_kwargs["reasoning_content"],
            "deepseek_blocks": [b["type"] for b in message.content_blocks],
            "deepseek_content": message.content,
            "deepseek_streamed": streamed,
        }))
        """,
    )
    assert found["openai_content"] == ANSWER
    assert "reasoning_content" not in found["openai_extra"]
    assert found["openai_blocks"] == ["text"]
    # X-Reasoning-Output: think_tags puts it where ChatOpenAI keeps it: in content
    assert found["openai_tagged"].startswith("<think>\nThe user asks for 17 * 23.")
    assert found["openai_tagged"].endswith("</think>\n\n" + ANSWER)
    assert "17 * 23" in found["deepseek_reasoning"]
    assert found["deepseek_blocks"] == ["reasoning", "text"]
    assert found["deepseek_content"] == ANSWER
    assert found["deepseek_streamed"] == found["deepseek_reasoning"]


def test_litellm_puts_it_on_the_message(base: str) -> None:
    found = run(
        base,
        """
        import json
        import litellm
        messages = [{"role": "user", "content": QUESTION}]
        args = {"model": "openai/demo-deepseek", "api_base": BASE, "api_key": "demo"}
        reply = litellm.completion(messages=messages, **args)
        stream = litellm.completion(messages=messages, stream=True, **args)
        streamed = "".join(
            getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in stream
        )
        message = reply.choices[0].message
        print(json.dumps({"reasoning": message.reasoning_content, "streamed": streamed,
                          "content": message.content}))
        """,
    )
    assert "17 * 23" in found["reasoning"]
    assert found["streamed"] == found["reasoning"]
    assert found["content"] == ANSWER


def test_the_agents_sdk_makes_a_reasoning_item(base: str) -> None:
    found = run(
        base,
        """
        import asyncio, json
        from openai import AsyncOpenAI
        from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
        from agents.items import ReasoningItem
        set_tracing_disabled(True)
        model = OpenAIChatCompletionsModel(
            model="demo-deepseek", openai_client=AsyncOpenAI(base_url=BASE, api_key="demo")
        )
        agent = Agent(name="calc", instructions="Answer.", model=model)

        async def main():
            result = await Runner.run(agent, QUESTION)
            items = [i for i in result.new_items if isinstance(i, ReasoningItem)]
            streamed = Runner.run_streamed(agent, QUESTION)
            deltas = [
                e.data.delta async for e in streamed.stream_events()
                if e.type == "raw_response_event"
                and e.data.type == "response.reasoning_summary_text.delta"
            ]
            print(json.dumps({
                "reasoning": "".join(s.text for i in items for s in i.raw_item.summary),
                "streamed": "".join(deltas),
                "content": result.final_output,
            }))

        asyncio.run(main())
        """,
    )
    assert "17 * 23" in found["reasoning"]
    assert found["streamed"] == found["reasoning"]
    assert found["content"] == ANSWER


def test_pydantic_ai_makes_a_thinking_part(base: str) -> None:
    found = run(
        base,
        """
        import json
        from pydantic_ai import Agent
        from pydantic_ai.messages import ThinkingPart
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        model = OpenAIChatModel(
            "demo-deepseek", provider=OpenAIProvider(base_url=BASE, api_key="demo")
        )
        result = Agent(model).run_sync(QUESTION)
        parts = [p for m in result.all_messages() for p in m.parts]
        thinking = [p.content for p in parts if isinstance(p, ThinkingPart)]
        print(json.dumps({"reasoning": "".join(thinking), "content": result.output}))
        """,
    )
    assert "17 * 23" in found["reasoning"]
    assert found["content"] == ANSWER
