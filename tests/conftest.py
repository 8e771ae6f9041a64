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
