"""The default store: bounded, in-process memory.

Conversations live in an LRU order (least recently used first). Turns are
kept serialized, so the byte count is what the data really takes. Bounds:
`max_conversations`, `max_bytes` (records plus a fixed per-entry overhead),
`ttl_seconds` after the last write, and `max_turns_per_conversation` (the
oldest turns go first). Stored response objects (the Responses API's) live
in their own LRU order under the same TTL, at most `max_conversations` of
them, and their bytes count toward the same `max_bytes`. One process only:
several workers would each hold their own history, so more than one worker
with this store is refused.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.reasoning.blocks import Turn
from proxy.stores.base import (
    ConversationInfo,
    ConversationKey,
    StoreStats,
    TurnRefs,
    decode_turn,
    decode_turns,
    encode_turn,
)

# Bytes of bookkeeping per turn, conversation and index entry (dict entries,
# keys, list slots; measured with tracemalloc), counted with the records so the cap holds for
# many tiny conversations too.
TURN_OVERHEAD = 200
CONVERSATION_OVERHEAD = 640
INDEX_OVERHEAD = 160
RESPONSE_OVERHEAD = 300


@dataclass(slots=True)
class _Conversation:
    records: list[bytes] = field(default_factory=list)
    first_index: int = 0  # absolute index of records[0] (older turns were dropped)
    size: int = CONVERSATION_OVERHEAD
    updated: float = 0.0
    model: str | None = None
    # the index keys each turn added, aligned with `records`
    turn_keys: list[tuple[str, ...]] = field(default_factory=list)


class MemoryStore:
    name = "memory"

    def __init__(
        self,
        *,
        max_conversations: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
        ttl_seconds: float = 7 * 24 * 3600,
        max_turns: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max_conversations = max_conversations
        self._max_bytes = max_bytes
        self._ttl = ttl_seconds
        self._max_turns = max_turns
        self._clock = clock
        self._conversations: OrderedDict[ConversationKey, _Conversation] = OrderedDict()
        # tenant -> index key -> (conversation id, absolute turn index)
        self._index: dict[str, dict[str, tuple[str, int]]] = {}
        self._profiles: dict[str, dict[str, Any]] = {}
        # (tenant, response id) -> (record, time written), least recently written first
        self._responses: OrderedDict[tuple[str, str], tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        self.evictions = 0

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> bool:
        return True

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        now = self._clock()
        self._expire(now)
        record = encode_turn(turn)
        conv = self._conversations.get(key)
        if conv is None:
            conv = self._conversations[key] = _Conversation()
            self._bytes += conv.size
        else:
            self._conversations.move_to_end(key)
        index_keys = tuple(refs.index_keys())
        conv.records.append(record)
        conv.turn_keys.append(index_keys)
        index = conv.first_index + len(conv.records) - 1
        tenant_index = self._index.setdefault(key.tenant, {})
        for index_key in index_keys:
            tenant_index[index_key] = (key.conversation, index)
        added = _turn_size(record, index_keys)
        conv.size += added
        self._bytes += added
        conv.updated = now
        conv.model = turn.model or conv.model
        while len(conv.records) > self._max_turns:
            self._drop_oldest(key, conv)
        self._evict(keep=key)
        return index

    async def turns(self, key: ConversationKey) -> list[Turn]:
        conv = self._live(key)
        return decode_turns(conv.records) if conv else []

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        ref = self._index.get(tenant, {}).get(index_key)
        if ref is None:
            return None
        conv = self._live(ConversationKey(tenant, ref[0]))
        if conv is None:
            return None
        position = ref[1] - conv.first_index
        if 0 <= position < len(conv.records):
            return decode_turn(conv.records[position])
        return None

    async def delete(self, key: ConversationKey) -> bool:
        conv = self._conversations.pop(key, None)
        if conv is None:
            return False
        self._forget(key, conv)
        return True

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        self._expire(self._clock())
        out: list[ConversationInfo] = []
        for key in reversed(self._conversations):
            if tenant is not None and key.tenant != tenant:
                continue
            conv = self._conversations[key]
            out.append(
                ConversationInfo(
                    key.tenant,
                    key.conversation,
                    conv.first_index + len(conv.records),
                    conv.updated,
                    conv.model,
                )
            )
            if len(out) >= limit:
                break
        return sorted(out, key=lambda c: c.updated, reverse=True)

    async def get_profile(self, name: str) -> dict[str, Any] | None:
        value = self._profiles.get(name)
        return dict(value) if value is not None else None

    async def put_profile(self, name: str, values: dict[str, Any]) -> None:
        self._profiles[name] = dict(values)

    async def delete_profile(self, name: str) -> bool:
        return self._profiles.pop(name, None) is not None

    async def list_profiles(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._profiles.items()}

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        now = self._clock()
        self._expire_responses(now)
        key = (tenant, response_id)
        old = self._responses.pop(key, None)
        if old is not None:
            self._bytes -= _response_size(key, old[0])
        record = bytes(record)
        self._responses[key] = (record, now)
        self._bytes += _response_size(key, record)
        # the new one goes last: older responses first, then conversations
        while len(self._responses) > 1 and (
            len(self._responses) > self._max_conversations or self._bytes > self._max_bytes
        ):
            self._drop_response()
        while self._bytes > self._max_bytes and self._conversations:
            dropped, conv = self._conversations.popitem(last=False)
            self._forget(dropped, conv)
            self.evictions += 1

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        found = self._responses.get((tenant, response_id))
        if found is None:
            return None
        if self._clock() - found[1] > self._ttl:
            self._responses.pop((tenant, response_id))
            self._bytes -= _response_size((tenant, response_id), found[0])
            return None
        return found[0]

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        live = await self.get_response(tenant, response_id)
        if live is None:
            return False
        key = (tenant, response_id)
        self._responses.pop(key)
        self._bytes -= _response_size(key, live)
        return True

    async def stats(self) -> StoreStats:
        turns = sum(len(c.records) for c in self._conversations.values())
        extra = {"evictions": self.evictions, "responses": len(self._responses)}
        return StoreStats(len(self._conversations), turns, self._bytes, extra)

    # -- internals -------------------------------------------------------------

    def _live(self, key: ConversationKey) -> _Conversation | None:
        conv = self._conversations.get(key)
        if conv is None:
            return None
        if self._clock() - conv.updated > self._ttl:
            self._conversations.pop(key)
            self._forget(key, conv)
            return None
        self._conversations.move_to_end(key)
        return conv

    def _expire(self, now: float) -> None:
        """Drop expired conversations from the least recently used end. Reads
        refresh the LRU order but not the expiry, so stop at the first live
        one only as an approximation; `_live` catches the rest on access."""
        while self._conversations:
            key, conv = next(iter(self._conversations.items()))
            if now - conv.updated <= self._ttl:
                return
            self._conversations.popitem(last=False)
            self._forget(key, conv)

    def _evict(self, keep: ConversationKey) -> None:
        """Least recently used conversations go first; `keep` (just written,
        so last in order) goes last: its own oldest turns are dropped instead."""
        while len(self._conversations) > 1 and (
            len(self._conversations) > self._max_conversations or self._bytes > self._max_bytes
        ):
            key, conv = self._conversations.popitem(last=False)
            self._forget(key, conv)
            self.evictions += 1
        while self._bytes > self._max_bytes and self._responses:
            self._drop_response()
        conv = self._conversations[keep]
        while self._bytes > self._max_bytes and len(conv.records) > 1:
            self._drop_oldest(keep, conv)

    def _drop_response(self) -> None:
        key, (record, _) = self._responses.popitem(last=False)
        self._bytes -= _response_size(key, record)
        self.evictions += 1

    def _expire_responses(self, now: float) -> None:
        """Stored responses are kept in write order, so the expired ones come first."""
        while self._responses:
            key, (record, written) = next(iter(self._responses.items()))
            if now - written <= self._ttl:
                return
            self._responses.popitem(last=False)
            self._bytes -= _response_size(key, record)

    def _drop_oldest(self, key: ConversationKey, conv: _Conversation) -> None:
        """Drop a conversation's oldest turn with its index entries and bytes."""
        record = conv.records.pop(0)
        index_keys = conv.turn_keys.pop(0)
        self._unindex(key, index_keys, conv.first_index)
        conv.first_index += 1
        size = _turn_size(record, index_keys)
        conv.size -= size
        self._bytes -= size

    def _forget(self, key: ConversationKey, conv: _Conversation) -> None:
        self._bytes -= conv.size
        for offset, index_keys in enumerate(conv.turn_keys):
            self._unindex(key, index_keys, conv.first_index + offset)

    def _unindex(self, key: ConversationKey, index_keys: tuple[str, ...], index: int) -> None:
        """Remove index entries that still point at this turn (a later turn
        may have taken the same key over)."""
        tenant_index = self._index.get(key.tenant)
        if tenant_index is None:
            return
        for index_key in index_keys:
            if tenant_index.get(index_key) == (key.conversation, index):
                del tenant_index[index_key]
        if not tenant_index:
            del self._index[key.tenant]


def _turn_size(record: bytes, index_keys: tuple[str, ...]) -> int:
    return len(record) + TURN_OVERHEAD + sum(len(k) + INDEX_OVERHEAD for k in index_keys)


def _response_size(key: tuple[str, str], record: bytes) -> int:
    return len(record) + len(key[0]) + len(key[1]) + RESPONSE_OVERHEAD
