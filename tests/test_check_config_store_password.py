"""`check-config` prints the resolved config with every secret shown as set
only: so is the password a Redis store URL carries (in its userinfo, or as
redis-py's `password` query option), which it used to print as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import closed_port

CONFIG = "routes:\n  - {name: local, upstream: 'http://127.0.0.1:8000/v1'}\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://app:hunter2-pw@127.0.0.1:{port}/0", "redis://app:<set>@127.0.0.1:{port}/0"),
        ("redis://:hunter2-pw@127.0.0.1:{port}/3", "redis://:<set>@127.0.0.1:{port}/3"),
        (
            "redis://127.0.0.1:{port}/0?password=hunter2-pw&socket_timeout=3",
            "redis://127.0.0.1:{port}/0?password=<set>&socket_timeout=3",
        ),
        ("sqlite:///{db}", "sqlite:///{db}"),
    ],
)
def test_the_store_password_is_not_printed(tmp_path: Path, url: str, shown: str) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    with closed_port() as port:  # a Redis that is down passes the check
        names = {"port": port, "db": tmp_path / "history.db"}
        env["REASONING_PROXY_STORE"] = url.format(**names)
        result = subprocess.run(
            [sys.executable, "-m", "proxy", "check-config", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert json.loads(result.stdout)["store"]["url"] == shown.format(**names)
