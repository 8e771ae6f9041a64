"""Real processes for the durable-store tests: a redis-server on a free port,
and the proxy started with its command line, as a user would run it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from tests.harness import free_port

SECRET = "durable-test-secret"


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "it") -> None:
    """Poll `predicate` until it holds (a deadline, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def redis_binary() -> str:
    path = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(path):
        raise RuntimeError("redis-server is needed by these tests (apt-get install redis-server)")
    return path


def store_url(kind: str, directory: Path, redis: RedisServer) -> str:
    """A store of each kind the proxy has: `memory`, `sqlite` (a file in
    `directory`) or `redis` (the running `redis`)."""
    urls = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{directory / 'history.db'}",
        "redis": redis.url,
    }
    return urls[kind]


class RedisServer:
    """A real redis-server in `directory`. `extra` arguments come after the
    defaults (no snapshots, no append-only file), so a test can turn
    persistence on."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.port = free_port()
        self.directory = directory
        self.extra = extra
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        args = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.directory), *self.extra]
        self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        process = self._process
        wait_until(
            lambda: self._answers() or process.poll() is not None, what="redis-server to start"
        )
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited: see {self.directory / 'redis.log'}")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server vanishes as in a crash."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def pause(self) -> None:
        """SIGSTOP: the server stalls (as in a long fork or a stuck disk);
        connections stay open and what they send waits in its buffers."""
        assert self._process is not None, "redis-server is not running"
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: the server runs what it was sent while paused."""
        assert self._process is not None, "redis-server is not running"
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)  # a paused server cannot stop
            self._process.terminate()
            self._process.wait(10)
            self._process = None


def _clean_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    env["REASONING_PROXY_SECRET"] = SECRET
    return {**env, **(extra or {})}


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy", "serve", *args]


class ProxyProcess:
    """`python -m proxy serve ...` on a free port, in its own process group
    (with `--workers N` the workers are its children)."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        log: Path,
        cwd: Path | None = None,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        self.command = [
            *prefix,
            *serve_command(*args, "--port", str(self.port), "--log-format", "text"),
        ]
        self.log = log
        self.cwd = cwd
        self.env = _clean_env(env)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ProxyProcess:
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        process = self._process
        wait_until(
            lambda: self._healthy() or process.poll() is not None,
            timeout=30,
            what="the proxy to start",
        )
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited:\n{self.log.read_text(errors='replace')}")
        return self

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def signal(self, sig: int) -> None:
        assert self._process is not None, "the proxy is not running"
        self._process.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        """The exit status, once the process has ended."""
        assert self._process is not None, "the proxy is not running"
        status = self._process.wait(timeout)
        self._process = None
        return status

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # our own group: the proxy and its workers
            process.wait(10)

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
