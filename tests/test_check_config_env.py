"""`check-config` without a file checks the one REASONING_PROXY_CONFIG names,
as `serve` would run it (an operator in a container, where the image sets
the variable, runs the command as it stands); with neither, one line and
exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONFIG = "routes:\n  - {name: local, upstream: 'http://127.0.0.1:8000/v1', dialect: vllm}\n"


def check_config(*args: str, config: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    if config is not None:
        env["REASONING_PROXY_CONFIG"] = config
    return subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
        check=False,
    )


def test_the_file_the_environment_names_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(CONFIG)
    result = check_config(config=str(path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["routes"][0]["dialect"] == "vllm"
    assert result.stderr.strip() == f"{path}: OK"


def test_a_file_named_wins_over_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(CONFIG)
    result = check_config(str(path), config=str(tmp_path / "missing.yaml"))
    assert result.returncode == 0, result.stderr


def test_neither_is_one_line_and_exit_status_2() -> None:
    result = check_config(config=None)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "reasoning-proxy: check-config: name a config file, or set REASONING_PROXY_CONFIG"
    ]
