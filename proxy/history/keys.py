"""Conversation keys: tenants, conversation ids and content fingerprints.

Tenant = HMAC-SHA256 of the client's credential under the server secret, so
the store never holds a key and one tenant cannot name another's data. A
request without credentials is the `anonymous` tenant. Without an
`X-Conversation-Id`, a conversation gets a random id (`AUTO_PREFIX`) and is
found again through its turns (`threads`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from proxy.stores.base import ConversationKey

__all__ = [
    "ANONYMOUS",
    "AUTO_PREFIX",
    "ConversationKey",
    "content_text",
    "credential",
    "fingerprint",
    "tenant_of",
    "without_whitespace",
]

ANONYMOUS = "anonymous"
_SCHEMES = frozenset(("bearer", "basic", "token", "digest"))
AUTO_PREFIX = "auto-"


def credential(authorization: str | None) -> str | None:
    """The credential in an Authorization header value (`Bearer` stripped)."""
    if not authorization:
        return None
    # the scheme ends at any whitespace: `Bearer<TAB>key` is the key's tenant too
    scheme, *after = authorization.strip().split(None, 1)
    rest = after[0] if after else ""
    if scheme.lower() in _SCHEMES and not rest.strip():
        return None  # a scheme without its credential is no key
    token = rest.strip() if scheme.lower() == "bearer" else authorization.strip()
    return token or None


def tenant_of(secret: bytes, authorization: str | None) -> str:
    token = credential(authorization)
    if token is None:
        return ANONYMOUS
    return "t-" + hmac.new(secret, token.encode(), hashlib.sha256).hexdigest()[:32]


def content_text(content: Any) -> str:
    """The text of a message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


@functools.cache
def _whitespace() -> dict[int, None]:
    """str.translate table deleting every character str.split() splits on."""
    return dict.fromkeys(c for c in range(0x3001) if chr(c).isspace())


# the ASCII characters str.split() splits on, for bytes.translate
_ASCII_WHITESPACE = bytes(c for c in range(128) if chr(c).isspace())


def without_whitespace(text: str) -> str:
    return _squeezed(text).decode()


def _squeezed(text: str) -> bytes:
    """`text` without whitespace, as UTF-8."""
    if text.isascii():  # most text: bytes.translate is a table lookup per byte
        return text.encode().translate(None, _ASCII_WHITESPACE)
    return text.translate(_whitespace()).encode()


def fingerprint(content: str, tool_calls: Sequence[tuple[str, str]] = ()) -> str | None:
    """A fingerprint of an assistant message's visible content and tool calls
    (name, arguments), whitespace removed; None when there is nothing to match.
    (The SHA-256 of `content 0x1d calls`, each call `name 0x1e arguments`,
    calls joined by 0x1f, all without whitespace, in UTF-8.)"""
    norm = _squeezed(content)
    if not norm and not tool_calls:
        return None
    digest = hashlib.sha256(norm)
    digest.update(b"\x1d")
    for n, (name, args) in enumerate(tool_calls):
        digest.update(b"%s%s\x1e%s" % (b"\x1f" if n else b"", name.encode(), _squeezed(args)))
    return digest.hexdigest()[:32]
