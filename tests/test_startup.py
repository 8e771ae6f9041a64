"""Start-up with a store that cannot work as configured: the command stops
at once with one clear line and exit status 2, before it listens. A store
that is only down (Redis not up yet) still starts, not ready until it is."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from proxy.config import ENV_CONFIG
from tests.harness import free_port
from tests.stores.servers import ProxyProcess, wait_until

UPSTREAM = "http://127.0.0.1:9/v1"


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    return {**clean, "REASONING_PROXY_SECRET": "startup-test-secret"}


def run(
    *args: str,
    cwd: Path | None = None,
    prefix: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "proxy", *args],
        capture_output=True,
        text=True,
        env={**env(), **(extra_env or {})},
        cwd=cwd,
        timeout=20,  # a refused start ends at once; this only stops a hung one
        check=False,
    )


def serve(store: str) -> subprocess.CompletedProcess[str]:
    return run("serve", "--upstream", UPSTREAM, "--store", store, "--port", str(free_port()))


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("reasoning-proxy: ")
    assert "Traceback" not in result.stderr
    assert "listening" not in result.stdout  # it stopped before the server started
    for word in words:
        assert word in lines[0]
    return lines[0]


@pytest.fixture
def garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database\n" * 200)
    return path


def test_a_sqlite_path_in_a_missing_directory_stops_start_up() -> None:
    assert_refused(serve("sqlite:////nonexistent-dir/x.db"), "/nonexistent-dir", "does not exist")


def test_a_file_that_is_not_a_database_stops_start_up(garbage: Path) -> None:
    assert_refused(serve(f"sqlite:///{garbage}"), str(garbage), "not a SQLite database")
    assert garbage.read_bytes() == b"this is not a database\n" * 200  # left as it was


def test_a_sqlite_file_that_cannot_be_created_stops_start_up(tmp_path: Path) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:  # root writes anywhere: run without that capability
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: a read-only directory cannot be made")
        prefix = ["setpriv", "--bounding-set", "-dac_override", "--"]
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        args = ["--upstream", UPSTREAM, "--store", f"sqlite:///{locked}/x.db"]
        result = run("serve", *args, "--port", str(free_port()), prefix=prefix)
        assert_refused(result, str(locked), "not writable")
    finally:
        locked.chmod(0o755)


def test_a_sqlite_path_that_is_a_directory_stops_start_up(tmp_path: Path) -> None:
    assert_refused(serve(f"sqlite:///{tmp_path}"), "not a file")


def test_a_database_from_a_newer_version_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    db.close()
    assert_refused(serve(f"sqlite:///{path}"), "newer version")


def test_a_database_whose_tables_lack_the_stores_columns_stops_start_up(tmp_path: Path) -> None:
    # another program's file with a `turns` table of its own: every append
    # would fail while the readiness probe (which writes `profiles`) passed
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE turns (tenant TEXT, conversation TEXT, idx INTEGER)")
        db.execute("CREATE TABLE profiles (name TEXT PRIMARY KEY)")
    db.close()
    before = path.read_bytes()
    line = assert_refused(serve(f"sqlite:///{path}"), str(path))
    assert "(turns.record, profiles.body)" in line
    assert "another program's database, or one changed by hand" in line
    assert path.read_bytes() == before  # left as it was


def test_a_database_of_the_first_schema_still_starts(tmp_path: Path) -> None:
    # schema 1 had every table but `responses` (and `deployment`), with the
    # same columns: it gains them when the store opens it
    from proxy.stores.sqlite import SCHEMA

    path = tmp_path / "schema1.db"
    first = SCHEMA.split("CREATE TABLE IF NOT EXISTS responses")[0]
    with sqlite3.connect(path) as db:
        db.executescript(first + "PRAGMA user_version = 1;")
    db.close()
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"routes:\n  - name: main\n    upstream: {UPSTREAM}\nstore:\n  url: sqlite:///{path}\n"
    )
    result = run("check-config", str(config))
    assert result.returncode == 0, result.stderr


def test_an_unknown_store_scheme_stops_start_up() -> None:
    assert_refused(serve("foo://x"), "unknown store URL scheme", "memory://")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("redis://127.0.0.1:99999/0", ["invalid Redis store URL", "out of range"]),
        ("redis://127.0.0.1:notaport/0", ["invalid Redis store URL"]),
        ("redis://127.0.0.1:6379/zero", ["invalid Redis store URL", "database number"]),
        ("redis://127.0.0.1:6379/0?colour=blue", ["invalid Redis store URL", "colour"]),
        ("redis://[::1/0", ["invalid store URL", "IPv6"]),
    ],
)
def test_a_malformed_redis_url_stops_start_up(url: str, words: list[str]) -> None:
    assert_refused(serve(url), *words)


def test_a_redis_password_is_not_echoed() -> None:
    line = assert_refused(serve("redis://user:hunter2-secret@127.0.0.1:99999/0"))
    assert "hunter2-secret" not in line


def test_demo_and_check_config_refuse_the_same_stores(tmp_path: Path, garbage: Path) -> None:
    demo = run("demo", "--store", "sqlite:////nonexistent-dir/x.db", "--port", str(free_port()))
    assert_refused(demo, "does not exist")
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"routes:\n  - name: main\n    upstream: {UPSTREAM}\nstore:\n  url: sqlite:///{garbage}\n"
    )
    assert_refused(run("check-config", str(config)), "not a SQLite database")


def test_a_usable_sqlite_path_is_not_created_by_the_check(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"routes:\n  - name: main\n    upstream: {UPSTREAM}\nstore:\n  url: sqlite:///new.db\n"
    )
    result = run("check-config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "new.db").exists()


def test_a_redis_that_is_down_still_starts_and_is_not_ready(
    tmp_path: Path, refusing_port: int
) -> None:
    closed = refusing_port
    proxy = ProxyProcess(
        ["--upstream", UPSTREAM, "--store", f"redis://127.0.0.1:{closed}/0"],
        log=tmp_path / "proxy.log",
    )
    with proxy:
        assert httpx.get(proxy.base + "/healthz", timeout=5).status_code == 200
        ready = httpx.get(proxy.base + "/readyz", timeout=5)
        assert ready.status_code == 503
    wait_until(lambda: "reasoning-proxy listening" in proxy.log.read_text(), what="the banner")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process's server already listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--upstream", UPSTREAM],
        ["serve", "--upstream", UPSTREAM, "--workers", "2", "--store", "sqlite:///busy.db"],
        ["demo"],
    ],
    ids=["serve", "serve-workers", "demo"],
)
def test_a_busy_port_stops_start_up_before_the_banner(
    command: list[str], busy_port: int, tmp_path: Path
) -> None:
    result = run(*command, "--port", str(busy_port), cwd=tmp_path)
    assert_refused(result, f"cannot listen on 127.0.0.1:{busy_port}", "in use")
    assert result.stdout == ""  # no banner at all


def test_an_address_this_machine_does_not_have_stops_start_up() -> None:
    # 192.0.2.0/24 is reserved for documentation: no machine has it
    result = run("serve", "--upstream", UPSTREAM, "--host", "192.0.2.1", "--port", "8787")
    assert_refused(result, "cannot listen on 192.0.2.1:8787")
    assert result.stdout == ""


def test_port_0_prints_the_port_it_listens_on() -> None:
    command = [sys.executable, "-m", "proxy", "serve", "--upstream", UPSTREAM, "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env()
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            pattern = r"reasoning-proxy listening on http://127\.0\.0\.1:(\d+) .*\n"
            match = re.fullmatch(pattern, line)
            assert match, line
            port = int(match[1])
            assert port != 0
            # the banner comes once the socket listens: it answers from now on
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        finally:
            process.terminate()
            assert process.wait(20) == 0


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("REASONING_PROXY_DIALECT", "kimi", "dialect"),
        ("REASONING_PROXY_IMPLICIT_OPEN_TAG", "1", "implicit_open_tag"),
    ],
)
def test_a_variable_of_the_upstream_route_beside_a_config_file_stops_start_up(
    tmp_path: Path, variable: str, value: str, key: str
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(f"routes:\n  - name: main\n    upstream: {UPSTREAM}\n")
    extra = {variable: value}
    served = run("serve", "--config", str(config), "--port", str(free_port()), extra_env=extra)
    line = assert_refused(served, variable, str(config), f"{key}: ${{{variable}}}")
    assert "Traceback" not in served.stderr
    # by the environment too, and check-config says the same
    served = run("serve", "--port", str(free_port()), extra_env={**extra, ENV_CONFIG: str(config)})
    assert assert_refused(served) == line
    assert assert_refused(run("check-config", str(config), extra_env=extra)) == line


def test_a_file_that_reads_the_dialect_variable_gets_it(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"routes:\n  - name: main\n    upstream: {UPSTREAM}\n"
        "    dialect: ${REASONING_PROXY_DIALECT}\n"
    )
    checked = run("check-config", str(config), extra_env={"REASONING_PROXY_DIALECT": "kimi"})
    assert checked.returncode == 0, checked.stderr
    (route,) = json.loads(checked.stdout)["routes"]
    assert route["dialect"] == "kimi"
    # `auto` and an empty value change nothing: no refusal
    for value in ("auto", ""):
        plain = tmp_path / "plain.yaml"
        plain.write_text(f"routes:\n  - name: main\n    upstream: {UPSTREAM}\n")
        ok = run("check-config", str(plain), extra_env={"REASONING_PROXY_DIALECT": value})
        assert ok.returncode == 0, ok.stderr
