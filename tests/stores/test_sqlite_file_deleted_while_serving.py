"""A SQLite store file deleted (with its -wal and -shm files) or replaced
while `serve --workers 2` runs on it. The workers' connections would go on
writing to the deleted file, which no later start can find: every turn
answered as persisted, /readyz ready, and all of it gone with the process.
Each worker opens the path again on its next call instead (a new file when
it is missing, the one put in its place otherwise), says so once, and what
it stores from then on is in the file a restart reads."""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess

AUTH = {"Authorization": "Bearer sk-deleted"}
WARNING = "is no longer the file the proxy opened"


def _ask(proxy: ProxyProcess, conversation: str) -> None:
    response = httpx.post(
        proxy.url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={**AUTH, "X-Conversation-Id": conversation},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def _turns(proxy: ProxyProcess, conversation: str) -> int:
    response = httpx.get(proxy.url + f"/conversations/{conversation}", headers=AUTH, timeout=10)
    return len(response.json()["turns"]) if response.status_code == 200 else 0


def _replace(db: Path, how: str) -> None:
    if how == "deleted":
        for name in (db.name, db.name + "-wal", db.name + "-shm"):
            (db.parent / name).unlink(missing_ok=True)
    else:  # a copy (a backup put back) renamed over it
        shutil.copy(db, db.parent / "restored.db")
        os.replace(db.parent / "restored.db", db)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_turns_after_the_file_was_deleted_or_replaced_are_in_the_file_at_the_path(
    tmp_path: Path, upstream: FakeUpstream, how: str
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}", "--workers", "2"]
    with ProxyProcess(args, log=tmp_path / "serving.log") as proxy:
        for _ in range(4):
            _ask(proxy, "before")
        _replace(db, how)
        for _ in range(12):  # enough that both workers serve some
            _ask(proxy, "after")
        assert httpx.get(proxy.base + "/readyz").status_code == 200
        assert _turns(proxy, "after") == 12
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as check:
        kept = dict(check.execute("SELECT conversation, count(*) FROM turns GROUP BY conversation"))
    assert kept.get("after") == 12
    if how == "deleted":  # what only the deleted file held is gone with it
        assert "before" not in kept

    with ProxyProcess(args, log=tmp_path / "restarted.log") as restarted:
        assert _turns(restarted, "after") == 12
    log = (tmp_path / "serving.log").read_text()
    assert 1 <= log.count(WARNING) <= 2, log  # once per worker that wrote
    assert "persisted=False" not in log
