"""Replicas are interchangeable: two `python -m proxy serve` processes on one
real redis-server, with the same REASONING_PROXY_SECRET, behind a client
that alternates between them on every request.

- An openai-SDK tool loop against a Kimi route: whichever replica stored a
  tool-call turn, the other one sends its reasoning back to the upstream
  (which Kimi requires), every time.
- The inspector's live feed on replica A shows a stream that replica B
  serves, while it streams.
- B gets SIGTERM in the middle of that stream: it finishes it, stores the
  turn and exits 0; A then re-injects that turn's reasoning too, and holds
  every turn of the conversation.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from tests.harness import FakeUpstream, Json, Stream
from tests.stores.kimi import kimi_config
from tests.stores.servers import ProxyProcess, RedisServer, wait_until

MODEL = "kimi-k2-thinking"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
        },
    }
]
STEPS = 6  # tool-call turns; then one answer


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fleet",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _reasoning(step: int) -> str:
    return f"Step {step}: I need the lookup for step {step} before answering."


def _tool_turn(step: int, call_id: str, gate_after: int | None = None) -> Stream:
    """A streamed Kimi tool-call turn: reasoning, then one call."""
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"step": step})},
    }
    return Stream(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"reasoning_content": _reasoning(step)}),
            _chunk({"tool_calls": [call]}),
            _chunk({}, "tool_calls"),
        ],
        gate_after=gate_after,
    )


def _answer() -> Json:
    return Json(
        {
            "id": "chatcmpl-fleet-end",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "reasoning_content": "Every lookup is in.",
                        "content": "All six lookups done.",
                    },
                    "finish_reason": "stop",
                }
            ],
        }
    )


def _sdk_tool_turn(client: OpenAI, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One streamed request through the SDK; the assistant message as a
    typical client keeps it: content and tool calls, no reasoning."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        stream=True,
    )
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(
                call.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                entry["function"]["name"] += call.function.name or ""
                entry["function"]["arguments"] += call.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


class LiveView:
    """The inspector's live feed of one replica, read in a thread as the
    page reads it (GET /ui/events with the tenant's key)."""

    def __init__(self, base: str, key: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.hello = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(base, key), daemon=True)

    def _read(self, base: str, key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10, read=None)) as client,
                client.stream("GET", base + "/ui/events", headers=headers) as response,
            ):
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line[6:]))
                        if self.events[-1]["type"] == "hello":
                            self.hello.set()
        except httpx.HTTPError:
            return  # the replica went away: the test is over

    def start(self) -> LiveView:
        self._thread.start()
        assert self.hello.wait(10), "no hello from the live feed"
        return self

    def join(self) -> None:
        self._thread.join(10)

    def of(self, conversation: str, kind: str) -> list[dict[str, Any]]:
        return [
            e
            for e in list(self.events)
            if e.get("conversation") == conversation and e["type"] == kind
        ]


@contextmanager
def _fleet(tmp_path: Path, upstream: FakeUpstream, redis: RedisServer) -> Iterator[list[Any]]:
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", redis.url]
    with (
        ProxyProcess(args, log=tmp_path / "a.log") as a,
        ProxyProcess(args, log=tmp_path / "b.log") as b,
    ):
        yield [a, b]


def _answered_turn(upstream: FakeUpstream, url: str, key: str, conversation: str) -> None:
    """One whole answered turn of `conversation`, through the proxy at `url`."""
    upstream.script(_answer())
    response = httpx.post(
        url + "/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}", "X-Conversation-Id": conversation},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def _until_live(view: LiveView, send: Callable[[str], None], what: str) -> None:
    """Send turns (to another replica) until one shows on `view`: the other
    replica has noticed that someone watches (it looks once a second)."""
    deadline = time.monotonic() + 15
    while True:
        conversation = f"warm-{uuid.uuid4().hex[:8]}"
        send(conversation)
        time.sleep(0.3)
        if view.of(conversation, "turn_end"):
            return
        assert time.monotonic() < deadline, f"gave up waiting for {what}"


def test_two_replicas_serve_one_tool_loop_one_live_view_and_lose_nothing_on_sigterm(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    key = f"sk-fleet-{uuid.uuid4().hex[:8]}"
    conversation = f"fleet-{uuid.uuid4().hex[:8]}"
    call_ids = [f"call_{uuid.uuid4().hex[:10]}" for _ in range(STEPS)]
    with _fleet(tmp_path, upstream, redis_server) as (a, b):
        clients = [
            OpenAI(
                base_url=replica.url,
                api_key=key,
                max_retries=0,
                timeout=30,
                default_headers={"X-Conversation-Id": conversation},
            )
            for replica in (a, b)
        ]
        view = LiveView(a.base, key).start()

        def warm(warm_conversation: str) -> None:
            _answered_turn(upstream, b.url, key, warm_conversation)

        _until_live(view, warm, "replica A's viewer to be known to replica B")

        messages: list[dict[str, Any]] = [{"role": "user", "content": "Run six lookups."}]

        def check_upstream_got_every_reasoning(done: int) -> None:
            """The request the upstream just got carries, on each of the
            `done` tool-call turns, the reasoning stored with it."""
            sent = upstream.chat_requests()[-1].json["messages"]
            assistants = [m for m in sent if m["role"] == "assistant"]
            assert len(assistants) == done
            for step, message in enumerate(assistants):
                assert message["tool_calls"][0]["id"] == call_ids[step]
                assert message.get("reasoning_content") == _reasoning(step), (step, message)

        # steps 0..4, on A, B, A, B, A
        for step in range(STEPS - 1):
            upstream.script(_tool_turn(step, call_ids[step]))
            assistant = _sdk_tool_turn(clients[step % 2], messages)
            check_upstream_got_every_reasoning(step)
            assert assistant["tool_calls"][0]["id"] == call_ids[step]
            assert "reasoning_content" not in assistant  # the client drops it, as most do
            messages += [
                assistant,
                {"role": "tool", "tool_call_id": call_ids[step], "content": f"result {step}"},
            ]
        # B's turns showed on A's live feed, each one whole (a turn ends on
        # the feed once stored, just after the client has its last byte)
        wait_until(
            lambda: len(view.of(conversation, "turn_end")) == STEPS - 1,
            what="every turn's end on A's live feed",
        )
        ends = view.of(conversation, "turn_end")
        assert all(e["complete"] and e["persisted"] for e in ends)

        # step 5 on B: A's viewer sees it while it streams; B is stopped mid-stream
        last = STEPS - 1
        gated = _tool_turn(last, call_ids[last], gate_after=2)
        upstream.script(gated)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_sdk_tool_turn, clients[1], messages)
            wait_until(
                lambda: any(
                    e.get("text") == _reasoning(last) for e in view.of(conversation, "delta")
                ),
                what="B's stream to show on A's live feed",
            )
            assert len(view.of(conversation, "turn_end")) == STEPS - 1  # still streaming
            b.signal(signal.SIGTERM)

            def draining() -> bool:
                return httpx.get(b.base + "/readyz", timeout=5).status_code == 503

            wait_until(draining, what="B to drain")
            gated.gate.set()
            assistant = pending.result(30)
        assert b.wait(30) == 0
        check_upstream_got_every_reasoning(last)
        assert assistant["tool_calls"][0]["id"] == call_ids[last]
        wait_until(
            lambda: len(view.of(conversation, "turn_end")) == STEPS,
            what="the end of B's last turn on A's live feed",
        )
        assert view.of(conversation, "turn_end")[-1]["complete"] is True

        # the answer, on A: every reasoning went back, B's last turn included
        messages += [
            assistant,
            {"role": "tool", "tool_call_id": call_ids[last], "content": f"result {last}"},
        ]
        upstream.script(_answer())
        answer = clients[0].chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        assert answer.choices[0].message.content == "All six lookups done."
        check_upstream_got_every_reasoning(STEPS)

        stored = httpx.get(
            f"{a.url}/conversations/{conversation}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        ).json()
        assert len(stored["turns"]) == STEPS + 1
        assert all(turn["complete"] for turn in stored["turns"])
        assert [turn["toolCallIds"] for turn in stored["turns"][:STEPS]] == [
            [call_id] for call_id in call_ids
        ]
    view.join()


def _served_by(log: Path) -> dict[str, str]:
    """conversation -> pid of the worker whose access-log line names it."""
    served = {}
    for line in log.read_text(errors="replace").splitlines():
        found = re.search(r"\[(\d+)\] proxy\.request: POST /v1/chat/completions 200 .*", line)
        conversation = re.search(r"conversation=(\S+)", line)
        if found and conversation:
            served[conversation.group(1)] = found.group(1)
    return served


def test_one_live_view_shows_every_workers_turns(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """`serve --workers 2` on Redis: the live feed, served by one worker,
    shows the turns both workers serve (each request on a new connection;
    the workers share the listening socket, and which one accepts is the
    kernel's choice: sent one at a time, one worker may win every accept on
    a busy machine, so they go in bursts that arrive together; the log's pid
    says which worker served each)."""
    key = f"sk-workers-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "workers.log"
    args = ["--config", str(kimi_config(tmp_path, upstream)), "--store", redis_server.url]
    with ProxyProcess([*args, "--workers", "2"], log=log) as proxy:
        view = LiveView(proxy.base, key).start()

        # until both workers know the viewer (each looks once a second)
        time.sleep(2.5)
        sent: list[str] = []
        served: dict[str, str] = {}
        with ThreadPoolExecutor(8) as pool:
            while len(set(served.values())) < 2 or len(sent) < 8:
                assert len(sent) < 96, f"one worker served every request: {served}"
                burst = [f"w-{uuid.uuid4().hex[:8]}" for _ in range(8)]
                sent += burst
                done = pool.map(lambda c: _answered_turn(upstream, proxy.url, key, c), burst)
                list(done)  # (raises what a request raised)
                served = {c: pid for c, pid in _served_by(log).items() if c in sent}
        wait_until(
            lambda: all(view.of(c, "turn_end") for c in sent),
            what="every worker's turns on the one live feed",
        )
        served = {c: pid for c, pid in _served_by(log).items() if c in sent}
        assert set(served) == set(sent)
        by_worker = {pid: [c for c in sent if served.get(c) == pid] for pid in set(served.values())}
        assert len(by_worker) == 2, by_worker
        assert all(by_worker.values()), by_worker
        for conversation in sent:
            assert view.of(conversation, "turn_start"), conversation
            assert view.of(conversation, "turn_end")[-1]["complete"] is True
    view.join()


def test_deployments_on_other_databases_or_secrets_see_none_of_each_others_streams(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """Regression: the live feed crossed deployments: Redis pub/sub
    ignores the database number, so an admin of a proxy on `/1` watched every
    stream of a proxy on `/0`. Here A and A2 are one deployment (database 0,
    one secret); B uses database 1 with A's secret, C database 0 with another
    secret. A2's admin view seeing A's turns shows A publishes; B's and C's
    admin views, watching all along, get none of them."""
    admin = f"admin-{uuid.uuid4().hex[:8]}"
    key = f"sk-deploy-{uuid.uuid4().hex[:8]}"
    config = str(kimi_config(tmp_path, upstream))
    server = redis_server.url.rsplit("/", 1)[0]
    db0, db1 = server + "/0", server + "/1"

    def replica(name: str, store: str, secret: str) -> ProxyProcess:
        env = {"REASONING_PROXY_SECRET": secret, "REASONING_PROXY_ADMIN_TOKEN": admin}
        return ProxyProcess(
            ["--config", config, "--store", store], log=tmp_path / f"{name}.log", env=env
        )

    with (
        replica("a", db0, "secret-one") as a,
        replica("a2", db0, "secret-one") as a2,
        replica("b", db1, "secret-one") as b,
        replica("c", db0, "secret-two") as c,
    ):
        others = {"B": LiveView(b.base, admin).start(), "C": LiveView(c.base, admin).start()}
        same = LiveView(a2.base, admin).start()

        def on_a(conversation: str) -> None:
            _answered_turn(upstream, a.url, key, conversation)

        _until_live(same, on_a, "A to publish to its own deployment's viewer")
        sent = [f"deploy-{uuid.uuid4().hex[:8]}" for _ in range(3)]
        for conversation in sent:
            on_a(conversation)
        wait_until(
            lambda: all(same.of(c, "turn_end") for c in sent),
            what="A's turns on A2's admin view",
        )
        time.sleep(1.0)  # time for a wrongly routed event to arrive
        for name, view in others.items():
            leaked = [e for e in list(view.events) if e["type"] != "hello"]
            assert leaked == [], (name, leaked[:2])
    for view in [*others.values(), same]:
        view.join()
