"""bench/run.py end to end, briefly: it runs every scenario against the real
fake upstream and proxy, reports numbers, and leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"stream", "nonstream", "tags", "ttft"}

pytestmark = pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
    reason="bench/run.py pins its processes to two cores with taskset",
)


def _session_members(sid: int) -> list[str]:
    """Live processes of session `sid` (the benchmark and all it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:  # it exited while we looked
            continue
        # fields after the command name: state ppid pgrp session ...
        state, _, _, session = stat[stat.rindex(b")") + 2 :].split()[:4]
        if int(session) == sid and state != b"Z":
            found.append(f"{entry.name}: {stat[: stat.rindex(b')') + 1].decode(errors='replace')}")
    return found


def _run_bench(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "bench.json"
    # its own session, so every descendant can be found again by session id afterwards
    proc = subprocess.Popen(
        [sys.executable, "bench/run.py", "--json", str(out), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, stderr.decode(errors="replace")
    assert _session_members(proc.pid) == []
    result: dict[str, Any] = json.loads(out.read_text())
    assert len(result["pids"]) >= 3  # upstream, proxy and at least one load generator
    return result, stdout.decode()


def test_every_scenario_runs_direct_and_through_the_proxy(tmp_path: Path) -> None:
    result, stdout = _run_bench(
        tmp_path,
        *("--duration", "1", "--warmup", "0.2"),
        *("--concurrency", "2", "--ttft-concurrency", "2", "--ttft-chunks", "8"),
    )
    scenarios = {s["name"]: s for s in result["scenarios"]}
    assert set(scenarios) == SCENARIOS
    for name, scenario in scenarios.items():
        for path in ("direct", "proxy"):
            numbers = scenario[path]
            assert numbers["requests"] > 0, (name, path)
            assert numbers["errors"] == {}, (name, path)
            if name != "nonstream":
                assert numbers["chunks"] > 0, (name, path)
        assert scenario["proxy"]["watched_cpu_s"] > 0, name
        assert scenario["proxy_peak_rss_mib"] > 0, name
        assert f"| {name} | 2 | proxy |" in stdout


def test_rss_run_samples_the_proxy(tmp_path: Path) -> None:
    result, stdout = _run_bench(
        tmp_path,
        *("--rss-run", "2", "--rss-interval", "0.5", "--rss-baseline", "1", "--concurrency", "2"),
    )
    run = result["rss_run"]
    assert run["load"]["requests"] > 0
    assert run["load"]["errors"] == {}
    assert len(run["samples"]) >= 3
    assert run["baseline_mib"] > 0
    assert "growth" in stdout


def test_the_client_comparison_reads_events_with_both_clients() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/clients.py", "--seconds", "0.5", "--rounds", "1", "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["aiohttp", "httpx", "http1"]
    for line in lines:
        events = int(line.split()[3].replace(",", ""))
        assert events >= 200  # at least one whole stream each
        assert "us per event" in line


def test_the_bare_forwarder_stands_in_for_the_proxy(tmp_path: Path) -> None:
    result, _stdout = _run_bench(
        tmp_path,
        *("--bare", "--only", "stream,nonstream", "--duration", "1", "--warmup", "0.2"),
        *("--concurrency", "2"),
    )
    for scenario in result["scenarios"]:
        assert scenario["proxy"]["requests"] > 0
        assert scenario["proxy"]["errors"] == {}
    # the bare forwarder passes the upstream's events as they are
    stream = next(s for s in result["scenarios"] if s["name"] == "stream")
    assert stream["proxy"]["chunks"] == stream["proxy"]["requests"] * 201  # 200 and [DONE]


def test_workers_are_counted_together(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'bench.db'}"
    result, stdout = _run_bench(
        tmp_path,
        *("--workers", "2", "--store", store, "--only", "nonstream"),
        *("--duration", "1", "--warmup", "0.2", "--concurrency", "2"),
    )
    (scenario,) = result["scenarios"]
    assert scenario["proxy"]["errors"] == {}
    # the supervisor itself idles: the CPU counted is its workers'
    assert scenario["proxy"]["watched_cpu_s"] > 0.1
    assert "(2 worker(s))" in stdout


def test_the_report_names_an_installed_build_and_its_compiled_modules() -> None:
    from bench.run import installed_build

    # the dev environment's install is editable: this tree, nothing compiled
    assert installed_build(sys.executable) == f"{ROOT / 'proxy'}, 0 compiled module(s)"
    assert installed_build("/nonexistent/python").startswith("unknown (")


def test_a_keyed_route_is_measured_too(tmp_path: Path) -> None:
    result, _stdout = _run_bench(
        tmp_path,
        *("--route-key", "sk-bench-route-key-0123456789", "--only", "stream"),
        *("--duration", "1", "--warmup", "0.2", "--concurrency", "2"),
    )
    (scenario,) = result["scenarios"]
    assert scenario["proxy"]["requests"] > 0
    assert scenario["proxy"]["errors"] == {}
