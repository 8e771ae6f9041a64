"""Stopping the proxy: a real SIGTERM (or SIGINT) to a real `python -m proxy
serve` process. The process drains (readiness 503, new requests 503, the
listener still open), lets live streams finish within the grace period,
cuts the rest with an error event and stores their partial turns, then
exits 0 without a traceback. Also: one tenant secret for all workers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from proxy.runtime import RANDOM_SECRET_WARNING
from tests.casefiles import chunk, read_stream
from tests.e2e.test_messages_native import ev as anthropic_event
from tests.harness import FakeUpstream, Hang, Stream, free_port
from tests.stores.servers import wait_until
from tests.test_responses_native import BASE, message
from tests.test_responses_native import event as response_event

KEY = {"Authorization": "Bearer sk-shutdown-test"}
SECRET = "shutdown-test-secret"
SECRET_WARNING = "REASONING_PROXY_SECRET is not set"
KEPT_SECRET = "using the tenant secret kept in the sqlite store"


class Serve:
    """`python -m proxy serve --config ...` in its own process group, its
    output (stdout and stderr) in a file."""

    def __init__(
        self, tmp_path: Path, config: dict[str, Any], *args: str, secret: str | None = SECRET
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        path = tmp_path / f"config-{self.port}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = tmp_path / f"proxy-{self.port}.log"
        self.command = [
            *(sys.executable, "-m", "proxy", "serve", "--config", str(path)),
            *("--port", str(self.port), "--log-format", "text", *args),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if secret is not None:
            env["REASONING_PROXY_SECRET"] = secret
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Serve:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,
            )  # fmt: skip
        process = self.process
        wait_until(lambda: _answers(self.base) or process.poll() is not None, 30, "the proxy")
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited:\n{self.output()}")
        return self

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the group if it lingers (cleanup only)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _answers(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def start(config: dict[str, Any], *args: str, secret: str | None = SECRET) -> Serve:
        proxy = Serve(tmp_path, config, *args, secret=secret)
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()


def proxy_config(
    upstream: FakeUpstream, tmp_path: Path, grace: float | None = None
) -> dict[str, Any]:
    server: dict[str, Any] = {} if grace is None else {"shutdown_grace_seconds": grace}
    return {
        "server": server,
        "store": {"url": f"sqlite:///{tmp_path}/turns.db"},
        "routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}],
    }


def words(n: int) -> list[dict[str, Any]]:
    return [chunk({"content": f"w{i} "}) for i in range(n)]


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes


def chat(base: str, conversation: str, started: threading.Event | None = None) -> Answer:
    """One streamed chat completion, read to its end; `started` is set at
    its first body bytes."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**KEY, "X-Conversation-Id": conversation}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", base + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        data = b""
        for raw in r.iter_raw():
            data += raw
            if started is not None and b"w0" in data:
                started.set()
        return Answer(r.status_code, r.headers, data)


def open_stream(pool: ThreadPoolExecutor, base: str, conversation: str) -> Future[Answer]:
    """A stream in a thread, returned once its first content arrived."""
    started = threading.Event()
    future = pool.submit(chat, base, conversation, started)
    wait_until(lambda: started.is_set() or future.done(), 15, f"{conversation} to start")
    assert not future.done(), future.result()
    return future


def wait_for_readyz_503(base: str) -> None:
    """Poll /readyz until it says 503; every answer must be an HTTP answer
    (a refused connection fails the test)."""
    statuses: list[int] = []

    def draining() -> bool:
        response = httpx.get(base + "/readyz", timeout=5)  # ConnectError fails the test
        statuses.append(response.status_code)
        return response.status_code == 503

    wait_until(draining, 5, "/readyz to answer 503")
    assert set(statuses) <= {200, 503}


def stored(base: str, conversation: str) -> dict[str, Any]:
    response = httpx.get(f"{base}/v1/conversations/{conversation}", headers=KEY, timeout=10)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def assert_clean(output: str) -> None:
    for word in ("Traceback", "CancelledError", "Exception in ASGI application"):
        assert word not in output, output


# -- one process -----------------------------------------------------------------------


def test_sigterm_drains_finishes_short_streams_and_cuts_long_ones(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    upstream.script(
        Stream([*words(300), chunk({}, "stop")], delay=0.1),  # 30 s: longer than the grace
        Stream([*words(6), chunk({}, "stop")], delay=0.15),  # about 1 s: inside it
    )
    proxy = serve(proxy_config(upstream, tmp_path, grace=4))
    assert httpx.get(proxy.base + "/readyz", timeout=5).status_code == 200
    with ThreadPoolExecutor(2) as pool:
        long = open_stream(pool, proxy.base, "shutdown-long")
        short = open_stream(pool, proxy.base, "shutdown-short")
        proxy.signal(signal.SIGTERM)

        wait_for_readyz_503(proxy.base)
        assert httpx.get(proxy.base + "/healthz", timeout=5).status_code == 200
        assert httpx.get(proxy.base + "/metrics", timeout=5).status_code == 200
        refused = httpx.post(
            proxy.base + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "late"}]},
            headers=KEY,
            timeout=5,
        )
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "server_shutting_down"
        assert refused.json()["error"]["type"] == "server_error"
        # pass-through and the proxy's own API are refused the same way
        models = httpx.get(proxy.base + "/v1/models", headers=KEY, timeout=5)
        assert models.status_code == 503
        assert models.json()["error"]["code"] == "server_shutting_down"
        # and the Messages door in its own shape
        message = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
        messages = httpx.post(proxy.base + "/v1/messages", json=message, headers=KEY, timeout=5)
        assert messages.status_code == 503
        assert messages.headers["retry-after"] == "1"
        assert messages.json()["type"] == "error"
        assert messages.json()["error"]["type"] == "overloaded_error"

        done = short.result(30)
        cut = long.result(30)
    assert proxy.wait(30) == 0
    assert len(upstream.chat_requests()) == 2  # the refused ones never went upstream

    assert done.status == 200
    read = read_stream(done.body)
    assert read["done"]
    assert read["errors"] == []
    assert read["content"] == "".join(f"w{i} " for i in range(6))

    assert cut.status == 200
    read = read_stream(cut.body)
    assert not read["done"]
    assert b"[DONE]" not in cut.body
    assert [e["code"] for e in read["errors"]] == ["server_shutting_down"]
    assert cut.body.endswith(b"\n\n")
    last = orjson.loads(cut.body.rstrip().rsplit(b"\n\n", 1)[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == "server_shutting_down"
    streamed = read["content"]
    assert streamed.startswith("w0 w1 ")
    assert len(streamed) < len("w0 ") * 300

    output = proxy.output()
    assert_clean(output)
    assert "cutting 1 request(s)" in output

    # the turns outlive the process: a new one on the same file finds them
    again = serve(proxy_config(upstream, tmp_path))
    [short_turn] = stored(again.base, "shutdown-short")["turns"]
    assert short_turn["complete"] is True
    [long_turn] = stored(again.base, "shutdown-long")["turns"]
    assert long_turn["complete"] is False
    assert long_turn["content"] == streamed.strip() or long_turn["content"] == streamed
    again.signal(signal.SIGTERM)
    assert again.wait(30) == 0  # nothing in flight: it stops at once
    assert_clean(again.output())


def native_stream(base: str, path: str, body: dict[str, Any], started: threading.Event) -> bytes:
    """One streamed answer of a native door, read to its end; `started` is
    set at its first text."""
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{base}/v1/{path}", json=body, headers=KEY) as r,
    ):
        data = b""
        for raw in r.iter_raw():
            data += raw
            if b"w0" in data:
                started.set()
        return data


def test_native_streams_cut_at_shutdown_end_with_their_doors_failure_event(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    # they ended with no failure event at all (the cut body simply stopped)
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    responses = [
        response_event("response.created", response={**BASE, "status": "in_progress"}),
        response_event("response.output_item.added", output_index=0, item=message("", "x")),
        *(response_event("response.output_text.delta", **at, delta=f"w{i} ") for i in range(300)),
    ]
    start = {"id": "msg_up", "type": "message", "role": "assistant", "content": []}
    messages = [
        anthropic_event("message_start", {"message": start}),
        anthropic_event("content_block_start", {"index": 0, "content_block": {"type": "text"}}),
        *(
            anthropic_event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": f"w{i}"}},
            )
            for i in range(300)
        ),
    ]
    # the requests go one after the other (the second once the first streams)
    upstream.script(
        Stream(responses, delay=0.1, done=False), Stream(messages, delay=0.1, done=False)
    )
    routes = [
        {"name": "r", "models": ["r"], "upstream": upstream.url, "api": "responses"},
        {"name": "m", "models": ["m"], "upstream": upstream.url, "api": "messages"},
    ]
    proxy = serve({**proxy_config(upstream, tmp_path, grace=1), "routes": routes})
    user = [{"role": "user", "content": "hi"}]
    with ThreadPoolExecutor(2) as pool:
        futures = []
        for path, body in (
            ("responses", {"model": "r", "input": "hi", "stream": True}),
            ("messages", {"model": "m", "max_tokens": 9, "stream": True, "messages": user}),
        ):
            started = threading.Event()
            futures.append(pool.submit(native_stream, proxy.base, path, body, started))
            wait_until(started.is_set, 15, f"the {path} stream to start")
        proxy.signal(signal.SIGTERM)
        responses_body, messages_body = (f.result(30) for f in futures)
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())
    name, data = responses_body.rstrip().rsplit(b"\n\n", 1)[-1].split(b"\n", 1)
    assert name == b"event: response.failed"
    error = orjson.loads(data.removeprefix(b"data: "))["response"]["error"]
    assert error["message"].endswith("(server_shutting_down)")
    name, data = messages_body.rstrip().rsplit(b"\n\n", 1)[-1].split(b"\n", 1)
    assert name == b"event: error"
    # as a request refused by the shutdown (503) says
    assert orjson.loads(data.removeprefix(b"data: "))["error"]["type"] == "overloaded_error"


def test_a_second_ctrl_c_ends_the_grace_period_at_once(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    upstream.script(Stream([*words(600), chunk({}, "stop")], delay=0.1))  # 60 s
    proxy = serve(proxy_config(upstream, tmp_path, grace=600))
    with ThreadPoolExecutor(1) as pool:
        stream = open_stream(pool, proxy.base, "twice")
        proxy.signal(signal.SIGINT)
        wait_for_readyz_503(proxy.base)
        proxy.signal(signal.SIGTERM)  # a repeated SIGTERM changes nothing
        assert not stream.done()
        proxy.signal(signal.SIGINT)
        cut = stream.result(20)  # long before the 600 s grace period
    read = read_stream(cut.body)
    assert [e["code"] for e in read["errors"]] == ["server_shutting_down"]
    assert not read["done"]
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())
    again = serve(proxy_config(upstream, tmp_path))
    [turn] = stored(again.base, "twice")["turns"]
    assert turn["complete"] is False


def test_requests_still_waiting_for_the_upstream_get_a_503_at_the_cut(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    upstream.script(
        Stream([*words(2), chunk({}, "stop")], delay=30),  # headers, then silence
        Hang(),  # not even headers
    )
    proxy = serve(proxy_config(upstream, tmp_path, grace=1))
    with ThreadPoolExecutor(2) as pool:
        chat = pool.submit(
            httpx.post,
            proxy.base + "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers={**KEY, "X-Conversation-Id": "waiting"},
            timeout=60,
        )
        wait_until(lambda: len(upstream.requests) == 1, 15, "the chat request upstream")
        passthrough = pool.submit(
            httpx.post, proxy.base + "/v1/embeddings", json={"model": "m"}, timeout=60
        )
        wait_until(lambda: len(upstream.requests) == 2, 15, "the pass-through request upstream")
        proxy.signal(signal.SIGTERM)
        answers = [chat.result(30), passthrough.result(30)]
    for answer in answers:
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["code"] == "server_shutting_down"
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())
    again = serve(proxy_config(upstream, tmp_path))
    [turn] = stored(again.base, "waiting")["turns"]
    assert turn["complete"] is False


def test_a_pass_through_stream_is_cut_by_closing_at_the_end_of_the_grace_period(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    upstream.script(Stream(words(300), delay=0.1))
    proxy = serve(proxy_config(upstream, tmp_path, grace=1))
    started = threading.Event()

    def read() -> tuple[bytes, Exception | None]:
        data = b""
        try:
            with httpx.stream(
                "POST", proxy.base + "/v1/completions", json={"model": "m"}, timeout=60
            ) as r:
                for raw in r.iter_raw():
                    data += raw
                    started.set()
        except httpx.HTTPError as exc:
            return data, exc
        return data, None

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(read)
        wait_until(lambda: started.is_set() or future.done(), 15, "the pass-through stream")
        proxy.signal(signal.SIGTERM)
        data, error = future.result(30)
    assert data.startswith(b"data: ")
    assert len(data) < len(sse_bytes(words(300)))
    assert isinstance(error, httpx.RemoteProtocolError)  # no final chunk: a cut body
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())


def sse_bytes(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


# -- several workers ---------------------------------------------------------------------


def test_sigterm_to_the_parent_of_two_workers_drains_them_and_exits_0(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    # held after its first words until the drain is seen, then about 3 s more
    held = Stream([*words(15), chunk({}, "stop")], delay=0.2, gate_after=2)
    upstream.script(held)
    proxy = serve(proxy_config(upstream, tmp_path, grace=20), "--workers", "2")
    with ThreadPoolExecutor(1) as pool:
        stream = open_stream(pool, proxy.base, "workers-drain")
        proxy.signal(signal.SIGTERM)  # to the parent (uvicorn's supervisor) only
        try:
            wait_for_readyz_503(proxy.base)
            assert not stream.done()
        finally:
            held.gate.set()
        answer = stream.result(30)
    read = read_stream(answer.body)
    assert read["done"]
    assert read["errors"] == []
    assert read["content"] == "".join(f"w{i} " for i in range(15))
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())


def test_a_second_ctrl_c_to_the_parent_of_two_workers_ends_their_grace_period(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    """The parent (uvicorn's supervisor) turned SIGINT into SIGTERM for its
    workers and ignored the second one: the workers waited out the whole
    grace period."""
    upstream.script(Stream([*words(600), chunk({}, "stop")], delay=0.1))  # 60 s
    proxy = serve(proxy_config(upstream, tmp_path, grace=600), "--workers", "2")
    with ThreadPoolExecutor(1) as pool:
        stream = open_stream(pool, proxy.base, "workers-twice")
        proxy.signal(signal.SIGINT)  # to the parent only, as `kill -INT` does
        wait_for_readyz_503(proxy.base)
        assert not stream.done()
        proxy.signal(signal.SIGINT)
        cut = stream.result(20)  # long before the 600 s grace period
    read = read_stream(cut.body)
    assert [e["code"] for e in read["errors"]] == ["server_shutting_down"]
    assert not read["done"]
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())


def test_workers_share_the_secret_the_store_keeps(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    """Without REASONING_PROXY_SECRET every worker must still map a key to
    the same tenant: a turn stored by one is found by the other."""
    proxy = serve(proxy_config(upstream, tmp_path), "--workers", "2", secret=None)
    response = httpx.post(
        proxy.base + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={**KEY, "X-Conversation-Id": "shared"},
        timeout=30,
    )
    assert response.status_code == 200, response.text

    def lookup(_: int) -> int:
        # a new connection each time: the workers take turns accepting
        with httpx.Client(timeout=10) as client:
            r = client.get(f"{proxy.base}/v1/conversations/shared", headers=KEY)
            return r.status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lookup, range(40)))
    assert statuses == [200] * 40
    proxy.signal(signal.SIGTERM)
    assert proxy.wait(30) == 0
    output = proxy.output()
    # the store keeps the secret: each worker says so, none warns
    assert output.count(KEPT_SECRET) == 2, output
    assert RANDOM_SECRET_WARNING not in output
    assert_clean(output)


def test_one_process_with_the_memory_store_does_not_warn_about_the_secret(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    config = {"routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}]}
    proxy = serve(config, secret=None)
    proxy.signal(signal.SIGTERM)
    assert proxy.wait(30) == 0
    assert SECRET_WARNING not in proxy.output()


def _upload_started(port: int, path: str, headers: dict[str, str] = {}) -> socket.socket:  # noqa: B006
    """A request whose headers are sent and whose body stops after a few bytes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"{head}Content-Length: 1000\r\n\r\n".encode() + b'{"model": "m", ')
    return sock


def _read_to_close(sock: socket.socket) -> bytes:
    data = b""
    with sock:
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _answer(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), fields, body


def test_uploads_unfinished_at_the_cut_get_a_503_in_their_doors_shape(
    tmp_path: Path, upstream: FakeUpstream, serve: Any
) -> None:
    """Requests whose body had not arrived when the grace period ended got
    uvicorn's bare `500 Internal Server Error` (text/plain), "ASGI callable
    returned without starting response" in the log, and status 499 in their
    access lines."""
    proxy = serve(proxy_config(upstream, tmp_path, grace=1))
    paths = {
        "/v1/chat/completions": {},
        "/v1/messages": {},
        "/v1/responses": {},
        "/v1/embeddings": {},  # the pass-through
        "/v1/messages/count_tokens": {"anthropic-version": "2023-06-01"},
        "/v1/files": {"anthropic-version": "2023-06-01"},  # the pass-through, to Anthropic's SDK
    }
    socks = {path: _upload_started(proxy.port, path, headers) for path, headers in paths.items()}
    time.sleep(0.5)  # every request reached its endpoint
    proxy.signal(signal.SIGTERM)
    answers = {path: _answer(_read_to_close(sock)) for path, sock in socks.items()}
    assert proxy.wait(30) == 0
    for path, (status, headers, data) in answers.items():
        assert (status, headers["content-type"]) == (503, "application/json"), (path, data)
        body = orjson.loads(data)
        assert headers["retry-after"] == "1", path
        if path.startswith("/v1/messages") or paths[path]:
            assert body["type"] == "error", path
            assert body["error"]["type"] == "overloaded_error", path
        else:
            assert body["error"]["code"] == "server_shutting_down", path
            assert body["error"]["type"] == "server_error", path
    assert upstream.requests == []
    output = proxy.output()
    assert_clean(output)
    assert "ASGI callable returned without" not in output
    for path in paths:
        # the access line says what was sent
        assert f"proxy.request: POST {path} 503 " in output, output
    assert " 499 " not in output
