"""The tenant secret when REASONING_PROXY_SECRET is not set: a store that
outlives the process keeps one (the first start's), so restarts and other
processes on it agree; the warning names what a random secret costs (stored
turns, and the sealed reasoning clients hold, lost at a restart), comes at
start when the store cannot keep one, waits for the first seal with the
memory store, and stays quiet where nothing outlives the process."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from proxy.config import Secret, build_config
from proxy.history.keys import tenant_of
from proxy.runtime import (
    KEPT_SECRET_NOTE,
    RANDOM_SECRET_WARNING,
    SEALED_SECRET_WARNING,
    Runtime,
)
from proxy.sealing import Sealed

ROUTES = {"routes": [{"name": "r", "models": ["*"], "upstream": "http://127.0.0.1:9/v1"}]}


def runtime(store: str, *, secret: str | None = None, drawn: bool = False) -> Runtime:
    config = build_config({**ROUTES, "store": {"url": store}}, env={})
    if secret is not None:
        config = replace(config, secret=Secret(secret))
    return Runtime(config, secret_drawn=drawn)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def started(rt: Runtime) -> None:
    async def run() -> None:
        await rt.start()
        await rt.close()

    # in a thread of its own: another test's browser may hold this thread's loop
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result(30)


def test_the_warning_names_what_is_lost() -> None:
    for text in (RANDOM_SECRET_WARNING, SEALED_SECRET_WARNING, KEPT_SECRET_NOTE):
        assert "REASONING_PROXY_SECRET" in text
        assert "encrypted_content" in text
        assert "signatures" in text
        assert "restart" in text
    assert "stored turns" in RANDOM_SECRET_WARNING
    assert "stored turns" in KEPT_SECRET_NOTE


def test_a_durable_store_keeps_the_secret_across_restarts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    first = runtime(url, secret="drawn-by-the-first-start", drawn=True)
    started(first)
    token = first.sealer.seal("t", Sealed("thought"))
    # the next start draws another secret, and uses the one the store kept
    second = runtime(url, secret="drawn-by-the-second-start", drawn=True)
    started(second)
    assert second.tenant("Bearer sk-user") == first.tenant("Bearer sk-user")
    assert second.tenant("Bearer sk-user") == tenant_of(
        b"drawn-by-the-first-start", "Bearer sk-user"
    )
    assert second.sealer.open("t", token) == Sealed("thought")
    # each start says where its secret came from, and what that means
    assert warnings(caplog) == [KEPT_SECRET_NOTE % "sqlite"] * 2


def test_a_store_that_cannot_keep_a_secret_warns_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rt = runtime(f"sqlite:///{tmp_path / 'missing-directory' / 'h.db'}")
    started(rt)
    (warning,) = warnings(caplog)
    assert warning.startswith(RANDOM_SECRET_WARNING)
    rt.sealer.seal("t", Sealed("thought"))  # said already: no second warning
    assert len(warnings(caplog)) == 1


def test_a_configured_secret_is_never_written_to_the_store(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    rt = runtime(f"sqlite:///{db}", secret="configured-secret")
    started(rt)
    assert rt.tenant("Bearer sk-user") == tenant_of(b"configured-secret", "Bearer sk-user")
    with closing(sqlite3.connect(db)) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "deployment" not in tables


def test_the_memory_store_warns_at_the_first_seal_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rt = runtime("memory://")
    started(rt)
    assert warnings(caplog) == []  # nothing the proxy keeps outlives the process
    token = rt.sealer.seal("t", Sealed("thought"))
    rt.sealer.seal("t", Sealed("another"))
    assert warnings(caplog) == [SEALED_SECRET_WARNING]
    assert rt.sealer.open("t", token) == Sealed("thought")


def test_a_secret_drawn_by_serve_counts_as_random(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rt = runtime("memory://", secret="drawn-for-this-run", drawn=True)
    started(rt)
    rt.sealer.seal("t", Sealed("thought"))
    assert warnings(caplog) == [SEALED_SECRET_WARNING]


def test_a_configured_secret_never_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    for store in ("memory://", f"sqlite:///{tmp_path / 'h.db'}"):
        rt = runtime(store, secret="configured-secret")
        started(rt)
        rt.sealer.seal("t", Sealed("thought"))
    assert warnings(caplog) == []
