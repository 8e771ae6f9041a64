"""Running the app under uvicorn, with a drain before the process stops.

uvicorn on its own answers SIGTERM by closing the listening socket at once
(new connections are refused), cancels what still runs after
`timeout_graceful_shutdown` (tracebacks, streams cut without a word), and
re-raises the signal (exit status 143). Here the first SIGTERM or SIGINT
starts a drain instead:

    serving --signal--> draining --(no request left, or grace over)--> stopping

- draining: the listener stays open. /healthz, /readyz (503) and /metrics
  answer; every other new request gets a 503 `server_shutting_down` with
  `Retry-After`. The chat and pass-through requests in progress run on for
  up to `server.shutdown_grace_seconds`; those left then are cut
  (`Runtime.drain`): a chat stream ends with an error event and stores its
  partial turn, a pass-through body is cut short.
- stopping: the other connections (idle keep-alives, the inspector's live
  feed, a probe) are closed, as if their clients had left; then uvicorn's
  own shutdown runs (listener, lifespan: upstream client and store closed)
  and the process exits with status 0.

A second SIGINT (Ctrl-C again) ends the grace period at once. A repeated
SIGTERM changes nothing: Kubernetes sends one and then, after its own grace
period, SIGKILL; and with `--workers`, uvicorn's supervisor forwards a
SIGTERM to workers that may already have had Ctrl-C's SIGINT.

With `--workers N` the parent is uvicorn's supervisor: on SIGTERM or SIGINT
it forwards SIGTERM to every worker (within half a second), waits for them
to finish their drains, and exits with status 0; a second SIGINT to it is
passed on to the workers as SIGINT, ending their grace period at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import signal
import socket
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.supervisors import multiprocess

from proxy.app import ProxyApp
from proxy.errors import ConfigError
from proxy.http_server import ProxyHttpProtocol, runtime_of
from proxy.runtime import Runtime

# Seconds uvicorn's own shutdown waits, after the drain, for connections to
# close before it cancels what is left (nothing should be left by then).
CLOSE_SECONDS = 5
STARTUP_FAILURE = 3  # the exit status uvicorn uses for a server that did not start
BACKLOG = 2048  # uvicorn's default
SIGNAL_POLL = 0.1  # seconds between two looks for a second SIGINT while workers drain


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host:port`, made before anything says it
    listens: a busy port or an address this machine does not have is one
    clear error (exit status 2) instead of a banner followed by uvicorn's
    log. Inheritable, for the worker processes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise ConfigError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with the drain above on SIGTERM and SIGINT."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._runtime: Runtime | None = None
        self._stopping: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of the event loop's
        # thread: it only sets flags, and on_tick starts the drain. The
        # signal is not recorded for uvicorn to re-raise, so the exit is 0.
        rt = self._runtime
        if rt is None:
            self.should_exit = True  # not serving yet: stop without a drain
        elif not rt.draining:
            rt.draining = True  # refuse new requests from now on
        elif sig == signal.SIGINT:
            rt.end_grace()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._runtime = runtime_of(self.config.loaded_app)
        await super().startup(sockets)
        _freeze_startup()

    async def on_tick(self, counter: int) -> bool:
        rt = self._runtime
        if rt is not None and rt.draining and self._stopping is None:
            self._stopping = asyncio.create_task(self._drain_then_stop(rt))
        return await super().on_tick(counter)

    async def _drain_then_stop(self, rt: Runtime) -> None:
        await rt.drain()
        # What still runs is none of the proxy's work (the inspector's live
        # feed, a probe, an idle keep-alive): closing its connection ends it
        # the way a client leaving does, so nothing needs cancelling.
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()
        self.should_exit = True


def _freeze_startup() -> None:
    """What start-up made (modules, the app, the config, and what the
    lifespan loaded: the tokenizer and the modules it imports) lives as long
    as the process: the cyclic collector need not walk it again on every
    full pass. Frozen after the lifespan (before it, some 60,000 references
    of what it loaded made each full pass under load take 1.5-3 ms)."""
    gc.collect()
    gc.freeze()


class _Worker(multiprocess.Process):
    """A worker process of uvicorn's supervisor, serving with a DrainingServer."""

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(self.config)
        return self._server


@contextlib.contextmanager
def _draining_workers() -> Iterator[None]:
    # uvicorn's supervisor makes each worker (also the ones it restarts) as
    # `Process(config, sockets)`, a module-level name, and has no other hook
    # for the server class its workers run.
    original = multiprocess.Process
    multiprocess.Process = _Worker  # type: ignore[misc]
    try:
        yield
    finally:
        multiprocess.Process = original  # type: ignore[misc]


class _Supervisor(multiprocess.Multiprocess):
    """uvicorn's supervisor, which also hears SIGINT while it waits for its
    workers to finish their drains (uvicorn's own waits in `join()`, deaf to
    every signal): a second SIGINT is passed on to them as SIGINT, after
    the SIGTERM that started their drains, which ends their grace period
    (as a second Ctrl-C does in one process)."""

    _second_int = False

    def handle_int(self) -> None:
        if self.should_exit.is_set():
            self._second_int = True  # passed on once the workers have had SIGTERM
        else:
            super().handle_int()

    def join_all(self) -> None:
        for process in self.processes:
            while process.exitcode is None:
                # waited on first: SIGINT sent right after the SIGTERM could
                # reach a worker with it and be handled first (signals run in
                # the order of their numbers), as a first signal, not a second
                process.process.join(SIGNAL_POLL)
                if self._second_int or signal.SIGINT in self.signal_queue:
                    self._second_int = False
                    self.signal_queue.clear()  # any other means nothing now
                    for worker in self.processes:
                        if worker.pid is not None and worker.exitcode is None:
                            os.kill(worker.pid, signal.SIGINT)


def _run_workers(config: uvicorn.Config, sockets: list[socket.socket] | None) -> None:
    sock = sockets[0] if sockets else config.bind_socket()
    try:
        if "target" in inspect.signature(multiprocess.Multiprocess).parameters:
            # uvicorn before its supervisor built the workers' servers itself
            # (0.30 to 0.35 at least): every worker runs the server given here
            target = DrainingServer(config).run
            _Supervisor(config, target=target, sockets=[sock]).run()  # type: ignore[call-arg]
        else:
            with _draining_workers():
                _Supervisor(config, sockets=[sock]).run()
    finally:
        if not sockets:
            sock.close()  # the caller closes its own


def run(
    app: ProxyApp | str,
    *,
    workers: int = 1,
    sockets: list[socket.socket] | None = None,
    **options: Any,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain and return. `app` is the
    app, or with several workers the import string of a factory that each
    worker calls; `sockets`: where to serve (from `listen`), else uvicorn
    binds host and port itself; `options` are uvicorn.Config's."""
    config = uvicorn.Config(
        app,
        workers=workers,
        factory=isinstance(app, str),
        timeout_graceful_shutdown=CLOSE_SECONDS,
        # httptools with the client bounds: header and body timeouts, header
        # count and size, an early 413 (proxy/http_server.py)
        http=ProxyHttpProtocol,
        **options,
    )
    # a Ctrl-C before the signal handlers are in place just stops (as uvicorn.run)
    if workers > 1:
        with contextlib.suppress(KeyboardInterrupt):
            _run_workers(config, sockets)
        return
    server = DrainingServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        sys.exit(STARTUP_FAILURE)
