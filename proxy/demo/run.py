"""`reasoning-proxy demo` (the simulated upstream comes with the demo issue)."""

from __future__ import annotations

import argparse

from proxy.errors import ConfigError


def run_demo(args: argparse.Namespace) -> None:
    raise ConfigError("the demo is not part of this build yet")
