"""A SQLite store whose file sits in a directory the proxy may not write:
SQLite (WAL mode) makes the -wal and -shm files beside the database even to
read it, so the proxy cannot open it. `serve` stops at start-up, exit status
2, with one line that names the directory and says what SQLite needs there."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream, free_port
from tests.stores.servers import ProxyProcess, serve_command


def _as_a_user_who_obeys_permissions() -> list[str]:
    """Root writes anywhere; run the proxy without that capability
    (util-linux `setpriv`) so a read-only directory is read-only."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only directory cannot be simulated")
    return ["setpriv", "--bounding-set", "-dac_override", "--"]


def test_serve_names_the_read_only_directory_of_a_wal_database(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    db = directory / "history.db"
    store = f"sqlite:///{db}"  # absolute: ////
    args = ["--upstream", upstream.url, "--store", store]
    with ProxyProcess(args, log=tmp_path / "writable.log") as proxy:
        response = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer sk-dir", "X-Conversation-Id": "kept"},
            timeout=10,
        )
        assert response.status_code == 200
    # a clean stop folds the WAL back into the file and removes -wal and -shm
    assert sorted(p.name for p in directory.iterdir()) == ["history.db"]

    directory.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        command = [
            *_as_a_user_who_obeys_permissions(),
            *serve_command(*args, "--port", str(free_port())),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        directory.chmod(stat.S_IRWXU)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("reasoning-proxy: --store: "), done.stderr
    assert f"directory {directory} is not writable" in done.stderr
    assert "history.db-wal and history.db-shm" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
