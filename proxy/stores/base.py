"""The ReasoningStore protocol and the values stores exchange.

A store keeps, per conversation key, the turns in order (as serialized
records), a tenant-wide index from tool-call ids and content fingerprints to
turns (so turns are found again without a conversation id), the named
profiles written through the API, the Responses API's stored response
objects (per tenant, opaque records, under the same TTL and caps as
conversations), and, for a deployment that configures none, its tenant
secret. Stores never see credentials: keys hold tenant hashes only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from proxy.reasoning.blocks import Turn, turn_from_record, turn_to_record


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a conversation's turns are kept: (tenant hash, conversation id)."""

    tenant: str
    conversation: str


class StoreFailure(Exception):
    """The backend failed (unreachable, read-only, full). Raised by stores
    only as this type, so callers can keep serving and count it."""


@dataclass(frozen=True, slots=True)
class TurnRefs:
    """What a stored turn can be found by."""

    tool_call_ids: tuple[str, ...] = ()
    fingerprint: str | None = None
    placed: str | None = None  # the fingerprint and where the turn sits in its history

    def index_keys(self) -> list[str]:
        keys = [f"t:{i}" for i in self.tool_call_ids]
        if self.fingerprint:
            keys.append(f"f:{self.fingerprint}")
        if self.placed:
            keys.append(f"p:{self.placed}")
        return keys


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    tenant: str
    conversation: str
    turns: int  # kept now (what `turns()` returns), not ever appended
    updated: float
    model: str | None = None


@dataclass(frozen=True, slots=True)
class StoreStats:
    conversations: int
    turns: int
    bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


class ReasoningStore(Protocol):
    """Async storage of turns and profiles. Every method may raise StoreFailure."""

    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        """Store a turn at the end of the conversation; returns its index."""
        ...

    async def turns(self, key: ConversationKey) -> list[Turn]: ...

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        """The latest turn of the tenant indexed under `t:<id>` or `f:<fp>`."""
        ...

    async def delete(self, key: ConversationKey) -> bool: ...

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        """Most recently updated first; tenant None means every tenant."""
        ...

    async def get_profile(self, name: str) -> dict[str, Any] | None: ...

    async def put_profile(self, name: str, values: dict[str, Any]) -> None: ...

    async def delete_profile(self, name: str) -> bool: ...

    async def list_profiles(self) -> dict[str, dict[str, Any]]: ...

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        """Keep a stored response object (replacing one of the same id). It
        expires `ttl_seconds` after this write; beyond `max_conversations`
        stored responses, the least recently written go first."""
        ...

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        """The tenant's stored response record, or None (unknown, expired,
        deleted, or another tenant's: all look alike)."""
        ...

    async def delete_response(self, tenant: str, response_id: str) -> bool: ...

    async def stats(self) -> StoreStats: ...

    async def tenant_secret(self, drawn: bytes) -> bytes:
        """The deployment's tenant secret kept in the store, for a proxy
        started without one: the secret stored already, else `drawn`, stored
        now. The first writer wins, so every process on one store agrees.
        The memory store keeps nothing beyond its process: `drawn`."""
        ...


def encode_turn(turn: Turn) -> bytes:
    # orjson hands back its buffer with about 4 KiB of capacity whatever the
    # size; copy it to an exact-size object, or a stored turn costs 4 KiB.
    return bytes(memoryview(orjson.dumps(turn_to_record(turn))))


def decode_turn(data: bytes | str) -> Turn:
    return turn_from_record(orjson.loads(data))


def decode_turns(records: Sequence[bytes | str]) -> list[Turn]:
    return [decode_turn(r) for r in records]
