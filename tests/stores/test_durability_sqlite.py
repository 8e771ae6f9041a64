"""Durability of the SQLite store as an operator meets it: `serve` killed
with SIGKILL in the middle of a burst of streams, and a database file the
proxy may not write (full disk, another process's write lock, garbage
bytes).

The contract under a crash: a turn is committed before the last bytes of
its response (the `[DONE]`) are sent, and the database runs in WAL mode with
`synchronous=NORMAL`, which loses nothing when the process dies (only a
power cut may lose the last commits). So every turn whose client read
`[DONE]` is in the database after a restart. What may be lost is exactly the
turns still streaming when the process died (they were never written; an
answer cut by a crash is not stored at all, not even as incomplete), and a
turn that was committed just before the kill may be there although its
client never read `[DONE]`. Nothing is stored twice, and every stored turn
is whole."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.harness import FakeUpstream, Stream
from tests.stores.servers import ProxyProcess, wait_until

AUTH = {"Authorization": "Bearer sk-durable"}
CONVERSATIONS = 10
BURST = 50  # streams in flight when the process is killed (some already done)
GATED = 20  # of those, streams held mid-answer until after the kill


def _answer(name: str, *, delay: float = 0.0, gate_after: int | None = None) -> Stream:
    words = [f"{name} ", "is ", "a ", "whole ", "answer."]
    return Stream(
        [
            {"choices": [{"index": 0, "delta": {"reasoning_content": f"Thinking about {name}."}}]},
            *({"choices": [{"index": 0, "delta": {"content": w}}]} for w in words),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ],
        delay=delay,
        gate_after=gate_after,
    )


def _content(name: str) -> str:
    return f"{name} is a whole answer."


def _stream(base: str, conversation: str) -> tuple[str, bool]:
    """One streamed request: the answer the client read, and whether it
    read the whole stream (its `[DONE]`)."""
    text, done = "", False
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**AUTH, "X-Conversation-Id": conversation}
    try:
        with httpx.stream(
            "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    for choice in orjson.loads(line[6:]).get("choices", []):
                        text += choice["delta"].get("content") or ""
    except httpx.TransportError:
        pass  # the proxy died under it
    return text, done


def _rows(db: Path) -> list[tuple[str, int, dict[str, Any]]]:
    with closing(sqlite3.connect(db)) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        counts = dict(check.execute("SELECT conversation, appended FROM conversations"))
        rows = check.execute("SELECT conversation, idx, record FROM turns ORDER BY 1, 2").fetchall()
    by_conversation: dict[str, list[int]] = {}
    for conversation, idx, _ in rows:
        by_conversation.setdefault(conversation, []).append(idx)
    for conversation, indexes in by_conversation.items():
        # every turn ever appended is there, numbered without a gap or a repeat
        assert indexes == list(range(counts[conversation])), conversation
    return [(c, i, orjson.loads(r)) for c, i, r in rows]


def _kill(proxy: ProxyProcess) -> None:
    """SIGKILL to the proxy's process group: no shutdown, no flush."""
    process = proxy._process
    assert process is not None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)
    proxy._process = None


def test_sigkill_in_a_burst_of_streams_loses_no_answered_turn(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    names = [f"c{n}" for n in range(CONVERSATIONS)]
    with ProxyProcess(args, log=tmp_path / "first.log") as proxy:
        # one turn per conversation before the burst
        for name in names:
            upstream.script(_answer(f"{name}-first"))
            assert _stream(proxy.base, name) == (_content(f"{name}-first"), True)

        # the burst: five streams per conversation at once; the gated ones
        # stop after their reasoning and wait past the kill, the others end
        # at different paces, so commits race the kill
        gate = threading.Event()
        answers = []
        for n in range(BURST):
            if n < GATED:
                answer = _answer(f"burst{n}", gate_after=2)
                answer.gate = gate
            else:
                answer = _answer(f"burst{n}", delay=0.01 * (n % 7))
            answers.append(answer)
        upstream.script(*answers)
        results: dict[int, tuple[str, bool]] = {}  # by request
        pool = ThreadPoolExecutor(BURST)
        futures = {
            n: pool.submit(_stream, proxy.base, names[n % CONVERSATIONS]) for n in range(BURST)
        }
        for n, future in futures.items():
            future.add_done_callback(lambda f, n=n: results.__setitem__(n, f.result()))
        # every stream reached the upstream, and half the others were answered
        wait_until(lambda: len(upstream.chat_requests()) == CONVERSATIONS + BURST, timeout=60)
        wait_until(lambda: len(results) >= (BURST - GATED) // 2, timeout=60)
        _kill(proxy)
        gate.set()
        pool.shutdown(wait=True)

    answered = {(names[n % CONVERSATIONS], text) for n, (text, done) in results.items() if done}
    cut = [text for text, done in results.values() if not done]
    assert len(results) == BURST
    # a client either read the whole answer and [DONE], or lost the stream
    assert all(_content(text.split(" ")[0]) == text for _, text in answered)
    assert len(cut) >= GATED

    rows = _rows(db)  # the file opens after the crash, and holds no half-written turn
    stored = [(c, "".join(p.get("text", "") for p in r["parts"]), r) for c, _, r in rows]
    contents = Counter(text for _, text, _ in stored)
    assert max(contents.values()) == 1, "a turn is stored twice"
    assert all(r["complete"] and r["finish_reason"] == "stop" for _, _, r in stored)
    assert {(n, _content(f"{n}-first")) for n in names} <= {(c, t) for c, t, _ in stored}
    burst_stored = {(c, text) for c, text, _ in stored if text.startswith("burst")}
    # every answered turn is there; what else is there was committed just
    # before the kill; no gated (mid-stream) answer is
    assert answered <= burst_stored
    extra = burst_stored - answered
    assert not any(int(text.split(" ")[0][5:]) < GATED for _, text in burst_stored)
    print(
        f"\nSIGKILL mid-burst: {BURST} streams, {len(answered)} answered, "
        f"{len(burst_stored)} stored ({len(extra)} committed but not answered), "
        f"{len(cut)} cut"
    )

    # the restarted proxy opens the file and carries on
    with ProxyProcess(args, log=tmp_path / "second.log") as proxy:
        assert httpx.get(proxy.base + "/readyz").status_code == 200
        upstream.script(_answer("after"))
        assert _stream(proxy.base, names[0]) == (_content("after"), True)
        turns = httpx.get(f"{proxy.url}/conversations/{names[0]}", headers=AUTH).json()["turns"]
        assert turns[0]["content"] == _content(f"{names[0]}-first")
        assert turns[-1]["content"] == _content("after")
        assert len(turns) == 2 + sum(1 for c, _ in burst_stored if c == names[0])


def _health(proxy: ProxyProcess) -> tuple[int, float, float]:
    """(/readyz status, reasoning_proxy_store_up, failed appends counted)."""
    ready = httpx.get(proxy.base + "/readyz", timeout=30).status_code
    metrics = httpx.get(proxy.base + "/metrics", timeout=30).text
    up, errors = -1.0, 0.0
    for line in metrics.splitlines():
        if line.startswith("reasoning_proxy_store_up "):
            up = float(line.split()[-1])
        if line.startswith('reasoning_proxy_store_operations_total{op="append",result="error"}'):
            errors = float(line.split()[-1])
    return ready, up, errors


def _stored(proxy: ProxyProcess, conversation: str) -> list[str]:
    r = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=AUTH, timeout=30)
    return [t["content"] for t in r.json()["turns"]] if r.status_code == 200 else []


def _one_line_error(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "turns are not persisted" in line]
    assert len(lines) == 1, text


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a disk that fills up."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk is simulated with a tmpfs mount, which needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    with contextlib.suppress(OSError), path.open("wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 4096)


def test_a_full_disk_answers_every_request_reports_not_ready_and_recovers(
    tmp_path: Path, upstream: FakeUpstream, small_disk: Path
) -> None:
    db = small_disk / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    log = tmp_path / "proxy.log"
    with ProxyProcess(args, log=log) as proxy:
        upstream.script(_answer("before"))
        assert _stream(proxy.base, "full") == (_content("before"), True)
        _fill(small_disk / "filler")

        for n in range(3):
            upstream.script(_answer(f"full{n}"))
            assert _stream(proxy.base, "full") == (_content(f"full{n}"), True)
        ready, up, errors = _health(proxy)
        assert (ready, up) == (503, 0.0)
        assert errors >= 1
        _one_line_error(log)

        (small_disk / "filler").unlink()
        upstream.script(_answer("after"))
        assert _stream(proxy.base, "full") == (_content("after"), True)
        assert _health(proxy)[:2] == (200, 1.0)
        stored = _stored(proxy, "full")
    assert stored[0] == _content("before")
    assert stored[-1] == _content("after")
    print(f"\nfull disk: 3 answered while full, {len(stored) - 2} of them stored")


def test_a_write_lock_held_by_another_process_delays_answers_but_never_breaks_them(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    log = tmp_path / "proxy.log"
    with ProxyProcess(args, log=log) as proxy:
        upstream.script(_answer("before"))
        assert _stream(proxy.base, "locked") == (_content("before"), True)

        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction
            upstream.script(_answer("locked"))
            # the append waits out the busy timeout, then gives up: answered all the same
            assert _stream(proxy.base, "locked") == (_content("locked"), True)
            ready, up, errors = _health(proxy)
            assert (ready, up, errors) == (503, 0.0, 1.0)
            _one_line_error(log)
            other.execute("ROLLBACK")

        upstream.script(_answer("after"))
        assert _stream(proxy.base, "locked") == (_content("after"), True)
        assert _health(proxy)[:2] == (200, 1.0)
        assert _stored(proxy, "locked") == [_content("before"), _content("after")]


def _corrupt_pages(db: Path, first: int) -> None:
    """Garbage over every page from `first` (1-based) on; the header and
    the schema on page 1 stay."""
    with closing(sqlite3.connect(db)) as check:
        (page,) = check.execute("PRAGMA page_size").fetchone()
        check.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    start = (first - 1) * page
    data[start:] = bytes((n * 37 + 11) % 256 for n in range(len(data) - start))
    db.write_bytes(bytes(data))


def test_a_database_with_garbage_pages_answers_every_request_and_says_why_once(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    with ProxyProcess(args, log=tmp_path / "first.log") as proxy:
        upstream.script(_answer("before"))
        assert _stream(proxy.base, "corrupt") == (_content("before"), True)
    _corrupt_pages(db, 2)

    log = tmp_path / "second.log"
    with ProxyProcess(args, log=log) as proxy:
        for n in range(3):
            upstream.script(_answer(f"corrupt{n}"))
            assert _stream(proxy.base, "corrupt") == (_content(f"corrupt{n}"), True)
        ready, up, errors = _health(proxy)
        assert (ready, up, errors) == (503, 0.0, 3.0)
        _one_line_error(log)
        assert "malformed" in log.read_text()
        listed = httpx.get(f"{proxy.url}/conversations/corrupt", headers=AUTH, timeout=30)
        assert listed.status_code == 503


def _as_schema_1(db: Path) -> None:
    """The file as the version before stored responses left it: schema 1,
    the same tables but `responses`."""
    with closing(sqlite3.connect(db, isolation_level=None)) as old:
        old.execute("DROP TABLE responses")
        old.execute("PRAGMA user_version = 1")


def test_a_schema_1_database_is_upgraded_in_place_and_keeps_its_turns(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    with ProxyProcess(args, log=tmp_path / "first.log") as proxy:
        upstream.script(_answer("before"))
        assert _stream(proxy.base, "old") == (_content("before"), True)
    _as_schema_1(db)

    with ProxyProcess(args, log=tmp_path / "second.log") as proxy:
        assert _stored(proxy, "old") == [_content("before")]
        created = httpx.post(
            proxy.url + "/responses", json={"model": "m", "input": "hi"}, headers=AUTH, timeout=30
        )
        assert created.status_code == 200, created.text
        kept = httpx.get(f"{proxy.url}/responses/{created.json()['id']}", headers=AUTH)
        assert kept.status_code == 200
        assert _health(proxy)[:2] == (200, 1.0)
    with closing(sqlite3.connect(db)) as check:
        assert check.execute("PRAGMA user_version").fetchone() == (2,)


def test_a_read_only_schema_1_database_serves_its_history_and_upgrades_once_writable(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    db = tmp_path / "history.db"
    args = ["--upstream", upstream.url, "--store", f"sqlite:///{db}"]
    with ProxyProcess(args, log=tmp_path / "first.log") as proxy:
        upstream.script(_answer("before"))
        assert _stream(proxy.base, "old") == (_content("before"), True)
    _as_schema_1(db)
    db.chmod(0o444)

    prefix = ["setpriv", "--bounding-set", "-dac_override", "--"] if os.geteuid() == 0 else []
    with ProxyProcess(args, log=tmp_path / "second.log", prefix=prefix) as proxy:
        assert _stored(proxy, "old") == [_content("before")]
        upstream.script(_answer("after"))
        assert _stream(proxy.base, "old") == (_content("after"), True)
        assert _health(proxy)[:2] == (503, 0.0)

        # writable again (with the -wal and -shm files SQLite made read-only
        # like the database): the upgrade runs before the next write
        for path in tmp_path.glob("history.db*"):
            path.chmod(0o644)
        upstream.script(_answer("writable"))
        assert _stream(proxy.base, "old") == (_content("writable"), True)
        assert _stored(proxy, "old") == [_content("before"), _content("writable")]
        created = httpx.post(
            proxy.url + "/responses", json={"model": "m", "input": "hi"}, headers=AUTH, timeout=30
        )
        assert created.status_code == 200, created.text
        kept = httpx.get(f"{proxy.url}/responses/{created.json()['id']}", headers=AUTH)
        assert kept.status_code == 200
        assert _health(proxy)[:2] == (200, 1.0)
