"""Sealed reasoning: reasoning that leaves the proxy inside an artefact the
client holds (a Responses `encrypted_content`, an Anthropic thinking
`signature`) and comes back in a later request.

An envelope is AES-256-GCM (authenticated encryption, `cryptography`) under
a key derived with HKDF-SHA256 from the tenant secret
(`REASONING_PROXY_SECRET`). It holds the reasoning text and the upstream's
own opaque artefacts, if any (its signature, its encrypted blob), byte for
byte; the tenant is bound as associated data, so one tenant cannot replay
another's envelope. `open()` gives None for anything it cannot open
(forged, foreign, another proxy's secret, truncated, not ours at all): the
caller ignores it, counts it and logs it, and the turn goes on.

Wire form: `rp1.` + base64url(nonce (12 bytes) + ciphertext + tag), no padding.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "rp1."
_NONCE = 12
_INFO = b"reasoning-proxy sealed reasoning v1"


@dataclass(frozen=True, slots=True)
class Sealed:
    """What an envelope holds."""

    reasoning: str
    # the upstream's own artefacts, kept verbatim: e.g. {"signature": "..."}
    # or {"encrypted": [...reasoning_details items...]}
    artefacts: dict[str, Any] = field(default_factory=dict)


class Sealer:
    """Seals and opens envelopes under one secret."""

    __slots__ = ("_aead",)

    def __init__(self, secret: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)
        self._aead = AESGCM(key)

    def seal(self, tenant: str, sealed: Sealed) -> str:
        plain = orjson.dumps({"r": sealed.reasoning, "a": sealed.artefacts})
        nonce = os.urandom(_NONCE)
        box = self._aead.encrypt(nonce, plain, tenant.encode())
        return PREFIX + base64.urlsafe_b64encode(nonce + box).rstrip(b"=").decode()

    def open(self, tenant: str, token: Any) -> Sealed | None:
        """The envelope's content, or None when it is not one this proxy sealed
        for this tenant."""
        if not isinstance(token, str) or not token.startswith(PREFIX):
            return None
        text = token[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) <= _NONCE:
            return None
        try:
            plain = self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], tenant.encode())
            data = orjson.loads(plain)
        except (InvalidTag, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("r"), str):
            return None
        artefacts = data.get("a")
        return Sealed(data["r"], artefacts if isinstance(artefacts, dict) else {})
