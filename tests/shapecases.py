"""The reasoning wire shapes upstreams send, as test data: each case is one
route's options, one answer streamed and the same answer whole, and what the
client and the store must get from it. The sans-IO normalizer
(tests/reasoning/test_input_shapes.py) and the real server
(tests/e2e/test_input_shapes_e2e.py) run every case streamed, re-split
into reads of 1-3 bytes, and non-streamed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.config import build_config
from proxy.reasoning.tags import TagSet
from tests.casefiles import chunk

Json = dict[str, Any]


@dataclass(frozen=True)
class InputCase:
    id: str
    about: str
    route: Json  # the route's config options
    chunks: list[Json]  # the streamed answer (then [DONE])
    completion: Json  # the same answer as one chat.completion
    content: str  # the answer the client sees, stripped
    thinking: list[str]  # the stored blocks' thoughts, stripped, in order
    # the reasoning the client sees, whitespace removed (default: the thoughts)
    reasoning: str | None = None
    # (sourceField, signature, isHidden) of each stored block, when checked
    blocks: list[tuple[str, str | None, bool]] | None = None
    truncated: bool = False
    max_reasoning_bytes: int | None = None  # limits.max_reasoning_bytes for the case
    # the answer may hold a reasoning delimiter (tags only at the start, or off)
    literal_tags: bool = False
    tool_call_ids: list[str] = field(default_factory=list)

    def tags(self) -> TagSet:
        return (
            build_config(
                {"routes": [{"name": "r", "upstream": "http://127.0.0.1:9/v1", **self.route}]}
            )
            .routes[0]
            .tags
        )

    @property
    def implicit(self) -> bool:
        return bool(self.route.get("implicit_open_tag"))

    @property
    def client_reasoning(self) -> str:
        text = self.reasoning if self.reasoning is not None else "".join(self.thinking)
        return "".join(text.split())


def pieces(text: str, size: int = 4) -> list[str]:
    """`text` in deltas of `size` characters, as a model streams tokens."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion(message: Json, finish: str = "stop") -> Json:
    return {
        "id": "chatcmpl-shape",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
    }


def content_case(
    id: str, about: str, route: Json, text: str, content: str, thinking: list[str], **kw: Any
) -> InputCase:
    """An answer with its delimiters inline in `content`, streamed in small deltas."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": p}) for p in pieces(text)]
    chunks.append(chunk({}, "stop"))
    return InputCase(
        id, about, route, chunks, completion({"content": text}), content, thinking, **kw
    )


HARMONY = (
    "<|channel|>analysis<|message|>The user greets me. Answer briefly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>"
)

CASES: list[InputCase] = [
    content_case(
        "magistral-think-brackets",
        "Mistral Magistral: [THINK]...[/THINK] before the answer",
        {"tags": [{"preset": "magistral"}]},
        "[THINK]Compute 2+2 first.[/THINK]The answer is 4.",
        "The answer is 4.",
        ["Compute 2+2 first."],
    ),
    content_case(
        "custom-pair-kimi-vl",
        "Kimi-VL: ◁think▷...◁/think▷, given as an open/close pair",
        {"tags": [{"open": "◁think▷", "close": "◁/think▷"}]},
        "◁think▷图里有一只猫。◁/think▷这是一只猫。",
        "这是一只猫。",
        ["图里有一只猫。"],
    ),
    content_case(
        "harmony-raw",
        "gpt-oss served raw: the analysis channel is reasoning, no marker reaches the answer",
        {"tags": [{"preset": "harmony"}]},
        HARMONY,
        "Hello! How can I help?",
        ["The user greets me. Answer briefly."],
    ),
    content_case(
        "harmony-without-end",
        "llama.cpp drops <|end|>: the final channel's header ends the analysis",
        {"tags": [{"preset": "harmony"}]},
        HARMONY.replace("<|end|>", "").replace("<|return|>", ""),
        "Hello! How can I help?",
        ["The user greets me. Answer briefly."],
    ),
    content_case(
        "tags-off",
        "tags: [] turns parsing off: the content passes whole",
        {"tags": []},
        "<think>not reasoning here</think>kept",
        "<think>not reasoning here</think>kept",
        [],
        literal_tags=True,
    ),
    content_case(
        "tags-only-at-start",
        "a literal <think> in the answer's code stays when tags count only at the start",
        {"tags_only_at_start": True},
        "<think>The user wants the tag.</think>\n\nWrite `<think>` and `</think>` around it.",
        "Write `<think>` and `</think>` around it.",
        ["The user wants the tag."],
        literal_tags=True,
    ),
    content_case(
        "hunyuan-answer-wrapper",
        "Hunyuan: <think>...</think> then <answer>...</answer>, the wrapper removed",
        {"answer_tags": ["answer"]},
        "<think>\nEasy.\n</think>\n<answer>\nIt is 4.\n</answer>",
        "It is 4.",
        ["Easy."],
    ),
    content_case(
        "granite-response-wrapper",
        "Granite: <think>...</think><response>...</response>, the wrapper removed",
        {"answer_tags": ["response"]},
        "<think>Plan.</think><response>Done.</response>",
        "Done.",
        ["Plan."],
    ),
    content_case(
        "tool-call-ends-unclosed-reasoning",
        "Qwen3 with the open tag in the prompt: a <tool_call> ends the unclosed reasoning",
        {"implicit_open_tag": True, "tool_call_markers": ["<tool_call>"]},
        'I should look it up.\n<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>',
        ["I should look it up."],
    ),
    content_case(
        "kimi-tool-section-ends-reasoning",
        "Kimi K2 raw: <|tool_calls_section_begin|> ends an unclosed <think> block",
        {"tool_call_markers": ["<|tool_calls_section_begin|>"]},
        "<think>Need the weather.<|tool_calls_section_begin|><|tool_call_begin|>x",
        "<|tool_calls_section_begin|><|tool_call_begin|>x",
        ["Need the weather."],
    ),
]


def native_case(
    id: str,
    about: str,
    route: Json,
    deltas: list[Json],
    message: Json,
    content: str,
    thinking: list[str],
    finish: str = "stop",
    **kw: Any,
) -> InputCase:
    """An answer with its reasoning in native fields: the streamed deltas,
    and the message of the same answer whole."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk(d) for d in deltas]
    chunks.append(chunk({}, finish))
    return InputCase(id, about, route, chunks, completion(message, finish), content, thinking, **kw)


SIG1 = "EqoBCkgIARABGAIiQL2UoU0b1OHYi+sig/one=="
SIG2 = "Eo8DCkYIBhgCKkDsecond+signature=="
CALL_A = {
    "index": 0,
    "id": "toolu_01",
    "type": "function",
    "function": {"name": "search", "arguments": '{"q": "a"}'},
}
CALL_B = {
    "index": 1,
    "id": "toolu_02",
    "type": "function",
    "function": {"name": "search", "arguments": '{"q": "b"}'},
}


def _thinking_piece(text: str, signature: str | None = None) -> Json:
    return {"type": "thinking", "thinking": text, "signature": signature}


LONG_REASONING = " ".join(f"step{n}" for n in range(700))  # about 5 KB, in one piece

CASES += [
    native_case(
        "litellm-thinking-blocks",
        "LiteLLM with an Anthropic model: reasoning_content and thinking_blocks, a signature, "
        "and a redacted block",
        {},
        [
            {"reasoning_content": "Let me ", "thinking_blocks": [_thinking_piece("Let me ")]},
            {"reasoning_content": "think.", "thinking_blocks": [_thinking_piece("think.")]},
            {"reasoning_content": "", "thinking_blocks": [_thinking_piece("", SIG1)]},
            {"thinking_blocks": [{"type": "redacted_thinking", "data": "ENCRYPTED-BLOB"}]},
            {"content": "Paris."},
        ],
        {
            "content": "Paris.",
            "reasoning_content": "Let me think.",
            "thinking_blocks": [
                {"type": "thinking", "thinking": "Let me think.", "signature": SIG1},
                {"type": "redacted_thinking", "data": "ENCRYPTED-BLOB"},
            ],
        },
        "Paris.",
        ["Let me think."],
        blocks=[("thinking_blocks", SIG1, False), ("thinking_blocks", None, True)],
    ),
    native_case(
        "thinking-blocks-around-tool-calls",
        "interleaved thinking: a signed block before each tool call, no reasoning_content",
        {},
        [
            {"thinking_blocks": [_thinking_piece("First look up a.")]},
            {"thinking_blocks": [_thinking_piece("", SIG1)]},
            {"tool_calls": [CALL_A]},
            {"thinking_blocks": [_thinking_piece("Then b.")]},
            {"thinking_blocks": [_thinking_piece("", SIG2)]},
            {"tool_calls": [CALL_B]},
        ],
        {
            "content": None,
            "thinking_blocks": [
                {"type": "thinking", "thinking": "First look up a.", "signature": SIG1},
                {"type": "thinking", "thinking": "Then b.", "signature": SIG2},
            ],
            "tool_calls": [
                {k: v for k, v in CALL_A.items() if k != "index"},
                {k: v for k, v in CALL_B.items() if k != "index"},
            ],
        },
        "",
        ["First look up a.", "Then b."],
        finish="tool_calls",
        blocks=[("thinking_blocks", SIG1, False), ("thinking_blocks", SIG2, False)],
        tool_call_ids=["toolu_01", "toolu_02"],
    ),
    native_case(
        "thinking-blocks-with-index",
        "an Anthropic-compatible upstream that numbers its streamed thinking blocks",
        {},
        [
            {"thinking_blocks": [{"index": 0, "type": "thinking", "thinking": "One,"}]},
            {"thinking_blocks": [{"index": 0, "type": "thinking", "thinking": " two."}]},
            {"thinking_blocks": [{"index": 0, "type": "thinking", "signature": SIG1}]},
            {"thinking_blocks": [{"index": 1, "type": "thinking", "thinking": "Three."}]},
            {"content": "Counted."},
        ],
        {
            "content": "Counted.",
            "thinking_blocks": [
                {"index": 0, "type": "thinking", "thinking": "One, two.", "signature": SIG1},
                {"index": 1, "type": "thinking", "thinking": "Three."},
            ],
        },
        "Counted.",
        ["One, two.", "Three."],
        blocks=[("thinking_blocks", SIG1, False), ("thinking_blocks", None, False)],
    ),
    native_case(
        "thinking-object",
        "`thinking` as an object with its text and a signature (streamed in pieces)",
        {},
        [
            {"thinking": {"text": "Weigh both "}},
            {"thinking": {"text": "options."}},
            {"thinking": {"signature": "sig-part-1/"}},
            {"thinking": {"signature": "part-2"}},
            {"content": "Option B."},
        ],
        {
            "content": "Option B.",
            "thinking": {"text": "Weigh both options.", "signature": "sig-part-1/part-2"},
        },
        "Option B.",
        ["Weigh both options."],
        blocks=[("thinking", "sig-part-1/part-2", False)],
    ),
    native_case(
        "thinking-object-parts",
        "`thinking` as a list of typed text parts, or an object with `content`",
        {},
        [
            {"thinking": [{"type": "text", "text": "Read "}, {"type": "text", "text": "the "}]},
            {"thinking": {"content": "question."}},
            {"content": "Yes."},
        ],
        {"content": "Yes.", "thinking": [{"type": "text", "text": "Read the question."}]},
        "Yes.",
        ["Read the question."],
        blocks=[("thinking", None, False)],
    ),
    native_case(
        "over-long-reasoning-in-one-piece",
        "reasoning longer than the storage bound in one delta: cut to the bound, truncated",
        {},
        [{"reasoning_content": LONG_REASONING}, {"content": "Done."}],
        {"content": "Done.", "reasoning_content": LONG_REASONING},
        "Done.",
        [LONG_REASONING[:1024].strip()],
        reasoning=LONG_REASONING,
        truncated=True,
        max_reasoning_bytes=1024,
    ),
]


def _mistral_thinking(text: str) -> Json:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


CASES += [
    native_case(
        "mistral-content-chunks",
        "Mistral's reasoning models: content as a list of thinking and text chunks",
        {},
        [
            {"content": [_mistral_thinking("Add two ")]},
            {"content": [_mistral_thinking("and two.")]},
            {"content": [{"type": "text", "text": "It is "}]},
            {"content": "4."},
        ],
        {
            "content": [
                _mistral_thinking("Add two and two."),
                {"type": "text", "text": "It is 4."},
            ]
        },
        "It is 4.",
        ["Add two and two."],
        blocks=[("reasoning_content", None, False)],
    ),
]
