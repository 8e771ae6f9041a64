"""Shared test settings. HYPOTHESIS_PROFILE=deep runs the property tests
with many more examples (slow; for local hunting, not CI)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, max_examples=150)
settings.register_profile(
    "deep", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


import pytest  # noqa: E402

from tests.harness import FakeUpstream  # noqa: E402


@pytest.fixture(scope="session")
def upstream_server() -> FakeUpstream:
    server = FakeUpstream().start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture
def upstream(upstream_server: FakeUpstream) -> FakeUpstream:
    upstream_server.reset()
    return upstream_server
