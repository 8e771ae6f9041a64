"""A SQLite store URL names its file after `sqlite://`, as database URLs do:
three slashes for a relative path, four for an absolute one. A URL without
the `//` (`sqlite:/data.db`, `sqlite:data.db`) stops `serve` with one line
and exit status 2; it used to be read as a relative path, so
`sqlite:/var/lib/proxy/history.db` kept the history under the working
directory, where a restart from elsewhere did not find it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.harness import free_port
from tests.stores.servers import ProxyProcess
from tests.test_startup import UPSTREAM, assert_refused, run


@pytest.mark.parametrize("form", ["sqlite:{absolute}", "sqlite:{relative}"])
def test_a_sqlite_url_without_its_slashes_stops_serve(tmp_path: Path, form: str) -> None:
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    url = form.format(absolute=work / "data" / "history.db", relative="data/history.db")
    result = run(
        "serve", "--upstream", UPSTREAM, "--store", url, "--port", str(free_port()), cwd=work
    )
    assert_refused(result, "sqlite:///relative/path.db", "sqlite:////absolute/path.db")
    assert not [p for p in tmp_path.rglob("*.db*")]  # nothing made anywhere


def test_three_slashes_are_relative_and_four_absolute(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    absolute = tmp_path / "absolute.db"
    for url in ("sqlite:///relative.db", f"sqlite:///{absolute}"):
        with ProxyProcess(
            ["--upstream", UPSTREAM, "--store", url], log=tmp_path / "proxy.log", cwd=work
        ) as proxy:
            assert httpx.get(proxy.base + "/readyz", timeout=30).status_code == 200
    for path in (work / "relative.db", absolute):
        db = sqlite3.connect(path)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.close()
        assert "conversations" in tables, path
