"""The bounded memo (proxy.memo.Recent): what it surely keeps, and at most."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.memo import Recent


@given(
    entries=st.integers(min_value=1, max_value=6),
    weight=st.integers(min_value=1, max_value=12),
    keys=st.lists(st.text(alphabet="abc", max_size=4), max_size=80),
)
def test_recent_keeps_the_most_recently_used_and_at_most_twice_as_many(
    entries: int, weight: int, keys: list[str]
) -> None:
    """A key is kept while fewer than `entries` other keys, weighing less
    than `weight` together, were used after it; at most twice the entries,
    and twice the weight (each half passing it by at most one key), are."""
    recent: Recent[str] = Recent(entries, weight, len)
    used: list[str] = []  # most recent last, each key once
    for key in keys:
        if recent.get(key) is None:
            recent.put(key, len(key) * 10)
        used = [k for k in used if k != key] + [key]
        for n, k in enumerate(used):
            after = used[n + 1 :]
            if len(after) < entries and sum(map(len, after)) < weight:
                assert k in recent

        held = [k for k in used if k in recent]
        assert len(held) <= 2 * entries
        assert sum(map(len, held)) < 2 * (weight + 4)
