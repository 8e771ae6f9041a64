"""Sealed reasoning envelopes: only this proxy, for this tenant, opens them."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.sealing import PREFIX, Sealed, Sealer

SEALER = Sealer(b"the-secret")
SEALED = Sealed("I think, therefore.", {"signature": "EqQBCkgIARABGAIi...", "n": [1, 2]})


def test_a_round_trip_keeps_the_reasoning_and_the_artefacts_verbatim() -> None:
    token = SEALER.seal("tenant-a", SEALED)
    assert token.startswith(PREFIX)
    assert "therefore" not in token  # encrypted, not encoded
    assert SEALER.open("tenant-a", token) == SEALED


def test_two_seals_of_the_same_reasoning_differ() -> None:
    assert SEALER.seal("t", SEALED) != SEALER.seal("t", SEALED)


def test_another_tenant_cannot_open_it() -> None:
    assert SEALER.open("tenant-b", SEALER.seal("tenant-a", SEALED)) is None


def test_another_secret_cannot_open_it() -> None:
    assert Sealer(b"another-secret").open("tenant-a", SEALER.seal("tenant-a", SEALED)) is None


def test_a_tampered_envelope_is_not_opened() -> None:
    token = SEALER.seal("t", SEALED)
    raw = bytearray(base64.urlsafe_b64decode(token[len(PREFIX) :] + "=="))
    raw[20] ^= 1
    forged = PREFIX + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    assert SEALER.open("t", forged) is None


@pytest.mark.parametrize(
    "token",
    [None, 42, "", "rp1.", "rp1.!!!", "rp1.AAAA", "gAAAAABnative-openai-blob", PREFIX + "x" * 7],
)
def test_what_is_not_an_envelope_is_none(token: object) -> None:
    assert SEALER.open("t", token) is None


@given(st.text(max_size=200), st.text(max_size=40))
def test_any_text_after_the_prefix_is_not_an_envelope(token: str, tenant: str) -> None:
    assert SEALER.open(tenant, PREFIX + token) is None


@given(st.text(max_size=500), st.text(min_size=1, max_size=40))
def test_any_reasoning_round_trips(reasoning: str, tenant: str) -> None:
    sealed = Sealed(reasoning)
    assert SEALER.open(tenant, SEALER.seal(tenant, sealed)) == sealed
