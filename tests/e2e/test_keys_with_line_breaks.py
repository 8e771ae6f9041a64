"""A route key or admin token that no HTTP header can carry as written (a
secret file's trailing newline, read through `${VAR}` or
REASONING_PROXY_ADMIN_TOKEN) stops `serve` at once: a message naming the
key, never its value, exit status 2, and nothing listening. Started, such a
route key would fail every request with a 502, and such an admin token would
match no `Authorization: Bearer` a client can send."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import free_port

KEY = "sk-line-break-key"


def serve(port: int, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--port", str(port), *args],
        capture_output=True,
        text=True,
        env={**clean, "REASONING_PROXY_SECRET": "line-break-secret", **env},
        timeout=20,  # a refused start ends at once; this only stops one that serves
        check=False,
    )


def assert_refused(result: subprocess.CompletedProcess[str], port: int, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("reasoning-proxy: ")
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr
    assert KEY not in result.stderr + result.stdout
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


@pytest.mark.parametrize("value", [KEY + "\n", KEY + "\r\n", " " + KEY, KEY + "\t"])
def test_a_route_key_with_a_line_break_or_edge_space_stops_serve(
    tmp_path: Path, value: str
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "routes:\n  - name: keyed\n    upstream: http://127.0.0.1:9/v1\n    api_key: ${ROUTE_KEY}\n"
    )
    port = free_port()
    result = serve(port, ["--config", str(config)], {"ROUTE_KEY": value})
    assert_refused(result, port, "routes[0].api_key")


@pytest.mark.parametrize("value", [KEY + "\n", " " + KEY])
def test_an_admin_token_with_a_line_break_or_edge_space_stops_serve(value: str) -> None:
    port = free_port()
    result = serve(
        port,
        ["--upstream", "http://127.0.0.1:9/v1"],
        {"REASONING_PROXY_ADMIN_TOKEN": value},
    )
    assert_refused(result, port, "REASONING_PROXY_ADMIN_TOKEN")


def test_an_admin_token_in_the_file_with_a_line_break_stops_serve(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "server: {admin_token: '${ADMIN}'}\n"
        "routes:\n  - name: open\n    upstream: http://127.0.0.1:9/v1\n"
    )
    port = free_port()
    result = serve(port, ["--config", str(config)], {"ADMIN": KEY + "\n"})
    assert_refused(result, port, "server.admin_token")
