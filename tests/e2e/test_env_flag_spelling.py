"""REASONING_PROXY_IMPLICIT_OPEN_TAG takes the true/false spellings a config
file's `implicit_open_tag: ${VAR}` takes; any other value stops `serve`
and `check-config` with one line naming the variable (exit status 2), as a
bad REASONING_PROXY_DIALECT does, instead of being read as false."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VAR = "REASONING_PROXY_IMPLICIT_OPEN_TAG"


def run(args: list[str], value: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    env[VAR] = value
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("value", ["enabled", "2", "tru"])
def test_serve_refuses_a_value_that_is_neither(value: str) -> None:
    # port 9: nothing may listen; the refusal comes before any socket
    done = run(["serve", "--upstream", "http://127.0.0.1:9", "--port", "20709"], value)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"reasoning-proxy: {VAR}={value}: not true or false "
        "(1, true, yes or on; 0, false, no, off or empty)"
    ]


def test_beside_a_file(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("routes:\n  - name: a\n    upstream: http://127.0.0.1:9\n")
    bad = run(["check-config", str(config)], "enabled")
    assert (bad.returncode, bad.stderr.splitlines()[-1:]) == (
        2,
        [
            f"reasoning-proxy: {VAR}=enabled: not true or false "
            "(1, true, yes or on; 0, false, no, off or empty)"
        ],
    )
    # `on` is true (as in the file): refused beside a file, as `1` is
    on = run(["check-config", str(config)], "On")
    assert on.returncode == 2
    assert f"{VAR} sets the --upstream route's implicit_open_tag" in on.stderr
    for value in ("off", "NO", ""):
        fine = run(["check-config", str(config)], value)
        assert fine.returncode == 0, (value, fine.stderr)
