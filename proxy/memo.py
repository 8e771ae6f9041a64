"""A bounded memo of atoms that costs the cyclic collector nothing (pure).

Used for token counts by text (`proxy.tokenizer.Count`) and for the log
texts that need no redaction (`proxy.observability.Redactor`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K", str, int)


class Recent(Generic[K]):
    """A bounded memo: the `entries` most recently used keys are
    surely kept (fewer if their weights, by `weigh`, pass `weight`), at most
    twice as many (and twice the weight) are.

    Two generations of plain dicts: a new key goes into the young one; when
    that is full it becomes the old one and the old one goes; a key found in
    the old one moves to the young one. Every operation is a dict operation,
    with no per-entry links: keys are str or int and values int, so the
    cyclic collector tracks none of it (an `lru_cache` of 16,384 entries added some
    50,000 visits to each full pass)."""

    __slots__ = ("_entries", "_old", "_weigh", "_weight", "_young", "_young_weight")

    def __init__(
        self, entries: int, weight: int = 0, weigh: Callable[[K], int] | None = None
    ) -> None:
        self._young: dict[K, int] = {}
        self._old: dict[K, int] = {}
        self._entries = entries
        self._weigh: Callable[[K], int] | None = weigh  # None: no bound by weight
        self._weight = weight
        self._young_weight = 0

    def get(self, key: K) -> int | None:
        found = self._young.get(key)
        if found is None:
            found = self._old.get(key)
            if found is not None:
                self.put(key, found)
        return found

    def __contains__(self, key: K) -> bool:
        return key in self._young or key in self._old

    def put(self, key: K, value: int) -> int:
        young = self._young
        young[key] = value
        if self._weigh is not None:
            self._young_weight += self._weigh(key)
        if len(young) >= self._entries or (
            self._weigh is not None and self._young_weight >= self._weight
        ):
            self._old, self._young, self._young_weight = young, {}, 0
        return value
