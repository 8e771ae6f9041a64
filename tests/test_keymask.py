"""KeyMask: route keys masked in whole bodies, headers and split streams."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.keymask import MASK, KeyMask, credential_values, encoded_forms

KEY = "rk-route-secret-0123456789"
OTHER = "sk-other-route-key-abcdef"


def test_nothing_to_mask_costs_nothing() -> None:
    assert KeyMask.of([]) is None
    assert KeyMask.of(["short"]) is None  # too short to be a key: would mask ordinary text


def test_whole_text_bytes_and_headers() -> None:
    mask = KeyMask.of([KEY, OTHER])
    assert mask is not None
    assert mask.text(f"bad key {KEY}, and {OTHER}") == f"bad key {MASK}, and {MASK}"
    assert mask.data(f"x{KEY}x".encode()) == f"x{MASK}x".encode()
    assert mask.headers([("x-echo", f"Bearer {KEY}"), ("ok", "fine")]) == [
        ("x-echo", f"Bearer {MASK}"),
        ("ok", "fine"),
    ]


def test_a_key_that_contains_another_is_masked_whole() -> None:
    mask = KeyMask.of([KEY, KEY + "-longer"])
    assert mask is not None
    assert mask.text(KEY + "-longer") == MASK


def test_credential_values_takes_keys_and_credential_headers() -> None:
    values = credential_values(
        [KEY],
        [
            ("X-Api-Key", "xk-12345678"),
            ("Authorization", "Bearer tok-12345678"),
            ("X-Title", "App"),
        ],
    )
    assert values == [KEY, "xk-12345678", "tok-12345678"]


def test_a_stream_holds_back_only_a_possible_key_start() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    stream = mask.stream()
    assert stream.feed(b"data: hello\n\n") == b"data: hello\n\n"  # nothing held
    assert stream.feed(b"bad key " + KEY[:5].encode()) == b"bad key "
    assert stream.feed(KEY[5:].encode() + b" end") == MASK.encode() + b" end"
    assert stream.feed(b"tail rk-") == b"tail "
    assert stream.flush() == b"rk-"  # not a key after all: given back at the end
    assert stream.flush() == b""


def test_a_tail_that_starts_like_a_key_but_differs_is_not_held() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    stream = mask.stream()
    assert stream.feed(b"rk-x rk-rout") == b"rk-x "


@given(
    st.lists(st.sampled_from(["plain ", KEY, "rk-", OTHER, "\n\n", "r", "k-route"]), max_size=12),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_split_masks_like_the_whole(parts: list[str], cuts: list[int]) -> None:
    mask = KeyMask.of([KEY, OTHER])
    assert mask is not None
    data = "".join(parts).encode()
    expected = mask.data(data)
    points = sorted({min(c, len(data)) for c in cuts})
    stream = mask.stream()
    out = b""
    start = 0
    for point in [*points, len(data)]:
        out += stream.feed(data[start:point])
        start = point
    out += stream.flush()
    assert out == expected
    assert KEY.encode() not in out
    assert OTHER.encode() not in out


def test_a_key_is_also_masked_as_encoders_write_it() -> None:
    key = "rk/base64+key=0123456789"
    mask = KeyMask.of([key])
    assert mask is not None
    for form in (
        key,
        key.replace("/", "\\/"),  # PHP's json_encode
        "rk%2Fbase64%2Bkey%3D0123456789",
        "rk%2fbase64%2bkey%3d0123456789",
        "rk/base64%2Bkey%3D0123456789",  # a URL path
    ):
        assert mask.text(f"<{form}>") == f"<{MASK}>", form
        stream = mask.stream()
        cut = len(form) // 2
        out = stream.feed(form[:cut].encode()) + stream.feed(form[cut:].encode()) + stream.flush()
        assert out == MASK.encode(), form
    # most API keys read the same in every encoding: one form, no extra cost
    assert encoded_forms("sk-plain_key.0123~") == {"sk-plain_key.0123~"}
