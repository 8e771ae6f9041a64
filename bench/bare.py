"""A bare forwarder: the floor the proxy's per-request cost is measured against.

Raw ASGI under uvicorn (httptools, uvloop), like the proxy's hot path, and
the proxy's own HTTP/1.1 client (`proxy.http1`), but nothing else: no
planning, history, normalizing, metrics or logging. A request's body goes to
the upstream's chat completions endpoint as it came, and the upstream's
status, content type and body come back (a stream read by read). What the
proxy costs above this is what its features cost.

    python -m bench.bare --upstream http://127.0.0.1:8900/v1 --port 8901
    python bench/run.py --bare     (in place of the proxy)
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from proxy import http1


def build(upstream: str) -> Any:
    url = urlsplit(upstream)
    origin = http1.Origin(url.scheme, url.hostname or "127.0.0.1", url.port or 80)
    target = url.path.rstrip("/") + "/chat/completions"
    host = ("host", url.netloc)
    state: dict[str, http1.Pool] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["pool"] = http1.Pool()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await state["pool"].close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] in ("/readyz", "/health"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [host, ("content-type", "application/json")]
        response = await state["pool"].request(
            origin, "POST", target, headers, b"".join(parts), connect_timeout=5, idle_timeout=60
        )
        try:
            kind = (response.header("content-type") or "application/json").encode()
            head: list[tuple[bytes, bytes]] = [(b"content-type", kind)]
            if not kind.startswith(b"text/event-stream"):
                body = []
                while data := await response.read():
                    body.append(data)
                whole = b"".join(body)
                head.append((b"content-length", str(len(whole)).encode()))
                await send(
                    {"type": "http.response.start", "status": response.status, "headers": head}
                )
                await send({"type": "http.response.body", "body": whole})
                return
            await send({"type": "http.response.start", "status": response.status, "headers": head})
            while data := await response.read():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            response.release()

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the upstream's API base URL")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build(args.upstream),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
