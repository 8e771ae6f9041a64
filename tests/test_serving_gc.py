"""`serve` freezes what start-up made, the lifespan's work included, so the
cyclic collector does not walk it on every full pass. Checked in a real
process serving on a real socket: what a lifespan made is not among the
objects the collector tracks, and what a request makes is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx

from tests.harness import free_port, stop
from tests.stores.servers import wait_until

APP = textwrap.dedent(
    """
    import contextlib, gc, sys
    from fastapi import FastAPI
    from proxy import serving

    made = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        made["lifespan"] = [object()]  # as a tokenizer loaded in the lifespan
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/tracked")
    async def tracked() -> dict[str, bool]:
        made["request"] = [object()]
        ids = {id(o) for o in gc.get_objects()}
        return {name: id(value) in ids for name, value in made.items()}

    serving.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/docs", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_what_the_lifespan_made_is_frozen_and_what_a_request_makes_is_not() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-c", APP, str(port)])
    try:
        wait_until(lambda: _answers(base) or process.poll() is not None, 30, "the server")
        assert process.poll() is None
        assert httpx.get(f"{base}/tracked", timeout=5).json() == {
            "lifespan": False,
            "request": True,
        }
    finally:
        stop(process)
