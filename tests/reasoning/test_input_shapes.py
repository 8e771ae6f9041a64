"""Every input shape of tests/shapecases.py through the sans-IO normalizer:
streamed whole, streamed in reads of 1-3 bytes (several seeds, and byte by
byte), at hypothesis-drawn cuts, and non-streamed; all give the same answer,
reasoning and stored turn."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.normalizer import (
    DONE,
    NormalizeOptions,
    StreamNormalizer,
    normalize_completion,
)
from tests.casefiles import cut_at, read_stream, render_stream
from tests.shapecases import CASES, InputCase

IDS = [c.id for c in CASES]


def options(case: InputCase, **kw: Any) -> NormalizeOptions:
    if case.max_reasoning_bytes is not None:
        kw.setdefault("max_reasoning_bytes", case.max_reasoning_bytes)
    return NormalizeOptions(tags=case.tags(), implicit_open_tag=case.implicit, **kw)


def streamed(case: InputCase, pieces: list[bytes] | None = None) -> tuple[dict[str, Any], Any]:
    body = render_stream(case.chunks)
    normalizer = StreamNormalizer(options(case))
    out = b"".join(normalizer.feed(p) for p in (pieces if pieces is not None else [body]))
    out += normalizer.finish()
    client = read_stream(out)
    assert client["done"]
    assert not client["errors"]
    assert normalizer.state == DONE
    return client, normalizer.turn()


def check(case: InputCase, content: str, reasoning: str, turn: Any) -> None:
    assert content.strip() == case.content
    assert "".join(reasoning.split()) == case.client_reasoning
    assert [b.thought.strip() for b in turn.thinking if b.thought] == case.thinking
    if case.blocks is not None:
        assert [(b.source_field, b.signature, b.is_hidden) for b in turn.thinking] == case.blocks
    assert turn.reasoning_truncated == case.truncated
    assert turn.tool_call_ids == case.tool_call_ids
    if not case.literal_tags:
        delimiters = case.tags().delimiters()
        assert not any(d in content.lower() for d in delimiters)
        assert not any(d in turn.content.lower() for d in delimiters)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_streamed(case: InputCase) -> None:
    client, turn = streamed(case)
    check(case, client["content"], client["reasoning"], turn)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("seed", range(6))
def test_streamed_in_reads_of_1_to_3_bytes(case: InputCase, seed: int) -> None:
    body = render_stream(case.chunks)
    whole = streamed(case)
    rng = random.Random(seed)
    client, turn = streamed(case, cut_at(body, [rng.randint(1, 3) for _ in range(len(body))]))
    assert (client["content"], client["reasoning"]) == (whole[0]["content"], whole[0]["reasoning"])
    assert turn.parts == whole[1].parts
    check(case, client["content"], client["reasoning"], turn)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_streamed_byte_by_byte(case: InputCase) -> None:
    body = render_stream(case.chunks)
    client, turn = streamed(case, [body[i : i + 1] for i in range(len(body))])
    check(case, client["content"], client["reasoning"], turn)
    assert turn.parts == streamed(case)[1].parts


@given(st.sampled_from(CASES), st.lists(st.integers(min_value=0, max_value=30), max_size=60))
def test_streamed_at_drawn_cuts(case: InputCase, sizes: list[int]) -> None:
    body = render_stream(case.chunks)
    client, turn = streamed(case, cut_at(body, sizes))
    check(case, client["content"], client["reasoning"], turn)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_non_streamed(case: InputCase) -> None:
    body = copy.deepcopy(case.completion)
    _, turn = normalize_completion(body, options(case))
    assert turn is not None
    message = body["choices"][0]["message"]
    check(case, message.get("content") or "", message.get("reasoning_content") or "", turn)
    assert [c["id"] for c in message.get("tool_calls") or []] == case.tool_call_ids
