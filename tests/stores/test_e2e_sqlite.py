"""End to end on SQLite: the proxy started with its command line, in front of
the fake upstream, on a database file that outlives it (or that it may not
write)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream, Stream
from tests.stores.kimi import (
    assert_reinjected,
    kimi_config,
    replay_without_reasoning,
    store_tool_call_turn,
    stored_turns,
)
from tests.stores.servers import ProxyProcess


@pytest.mark.parametrize("secret", ["configured", "unset"])
def test_a_restarted_proxy_reinjects_reasoning_stored_before_the_restart(
    tmp_path: Path, upstream: FakeUpstream, secret: str
) -> None:
    config = kimi_config(tmp_path, upstream)
    # a relative URL: the file lands in the proxy's working directory
    args = ["--config", str(config), "--store", "sqlite:///history.db"]
    # unset: each start draws a secret, and the store keeps the first one
    env = {"REASONING_PROXY_SECRET": ""} if secret == "unset" else None
    with ProxyProcess(args, log=tmp_path / "first.log", cwd=tmp_path, env=env) as first:
        store_tool_call_turn(first.base, upstream, "restart-1")
    assert (tmp_path / "history.db").is_file()

    with ProxyProcess(args, log=tmp_path / "second.log", cwd=tmp_path, env=env) as second:
        assert_reinjected(replay_without_reasoning(second.base, upstream, "restart-1"))
        turns = stored_turns(second.base, "restart-1").json()["turns"]
        assert [t["toolCallIds"] for t in turns] == [["call_0"], []]


def _without_file_permission_override() -> list[str]:
    """Root writes read-only files anyway; run the proxy without that
    capability (util-linux `setpriv`) so a read-only file is read-only."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only file cannot be simulated")
    return ["setpriv", "--bounding-set", "-dac_override", "--"]


@pytest.mark.parametrize("secret", ["configured", "unset"])
def test_a_read_only_database_answers_every_request_and_keeps_nothing(
    tmp_path: Path, upstream: FakeUpstream, secret: str
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]  # absolute: ////
    auth = {"Authorization": "Bearer sk-ro"}
    # unset: the read-only file still holds the secret its writable days kept
    env = {"REASONING_PROXY_SECRET": ""} if secret == "unset" else None
    with ProxyProcess(args, log=tmp_path / "writable.log", env=env) as proxy:
        response = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={**auth, "X-Conversation-Id": "before"},
        )
        assert response.status_code == 200
    db.chmod(0o444)

    prefix = _without_file_permission_override()
    with ProxyProcess(args, log=tmp_path / "read-only.log", prefix=prefix, env=env) as proxy:
        assert httpx.get(proxy.url + "/conversations/before", headers=auth).status_code == 200

        upstream.script(
            Stream(
                [
                    {"choices": [{"index": 0, "delta": {"reasoning_content": "Think."}}]},
                    {"choices": [{"index": 0, "delta": {"content": "Still "}}]},
                    {"choices": [{"index": 0, "delta": {"content": "answered."}}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                ]
            )
        )
        body = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers={**auth, "X-Conversation-Id": "after"},
            timeout=30,
        ).text
        assert '"Still "' in body
        assert body.rstrip().endswith("data: [DONE]")

        assert httpx.get(proxy.url + "/conversations/after", headers=auth).status_code == 404
        ready = httpx.get(proxy.base + "/readyz")
        assert ready.status_code == 503
        assert ready.json()["store"] == "down"

    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as check:
        assert check.execute("SELECT conversation FROM conversations").fetchall() == [("before",)]
