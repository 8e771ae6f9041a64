"""`serve` says at start-up which token encoding it counts with: one info
line of logger `proxy.tokens` naming the encoding loaded (off the event
loop, before the first request), whichever of the fallback chain it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from proxy.tokenizer import DEFAULT_ENCODINGS
from tests.harness import stop

ROOT = Path(__file__).resolve().parents[2]
PORT = 20710
SERVE = [sys.executable, "-m", "proxy", "serve", "--upstream", "http://127.0.0.1:9"]


def test_the_encoding_in_use_is_logged_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    output = tmp_path / "serve.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*SERVE, "--port", str(PORT)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, output.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{PORT}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.1)
    finally:
        stop(process)
    lines = [
        json.loads(line)
        for line in output.read_text().splitlines()
        if line.startswith("{") and '"proxy.tokens"' in line
    ]
    assert len(lines) == 1, output.read_text()
    (line,) = lines
    if line["level"] == "info":
        assert line["msg"] in [f"counting tokens with the {n} encoding" for n in DEFAULT_ENCODINGS]
    else:  # no encoding could be loaded: the fallback's warning says so
        assert line["level"] == "warning"
        assert "ceil(characters / 4)" in line["msg"]
