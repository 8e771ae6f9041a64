"""The ownership records' failure path, in process (the app called through
httpx's ASGI transport, which raises what the app raises; the upstream a
mock transport): a store that fails after an upstream DELETE was answered
is counted, and no second response is started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.config import build_config
from proxy.runtime import Runtime
from proxy.stores.base import StoreFailure
from proxy.upstream import MockResponse, MockTransport, Request

pytestmark = pytest.mark.anyio

ALICE = {"Authorization": "Bearer sk-alice-ownership"}
JSON = [("content-type", "application/json")]
MADE = {
    "id": "resp_own",
    "object": "response",
    "status": "completed",
    "model": "m",
    "output": [],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def answer(request: Request) -> MockResponse:
    if request.method == "DELETE":
        body = {"id": "resp_own", "object": "response.deleted", "deleted": True}
        return MockResponse(200, JSON, orjson.dumps(body))
    return MockResponse(200, JSON, orjson.dumps(MADE))


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    route = {"name": "r", "upstream": "https://up.test/v1", "api": "responses", "api_key": "rk-1"}
    config = build_config({"routes": [route]}, env={"REASONING_PROXY_SECRET": "own-secret"})
    runtime = Runtime(config, transport=MockTransport(answer))
    await runtime.start()
    try:
        transport = httpx.ASGITransport(create_app(config, runtime=runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            yield client, runtime
    finally:
        await runtime.close()


async def test_a_store_failure_after_an_upstream_delete_is_counted_not_answered_twice(
    app: tuple[httpx.AsyncClient, Runtime],
) -> None:
    client, runtime = app
    made = await client.post("/v1/responses", json={"model": "m", "input": "x"}, headers=ALICE)
    assert made.status_code == 200, made.text

    class DeletesFail:
        """The store, but its deletes fail (a wrapper: the compiled build's
        store takes no attribute of a test's own)."""

        def __init__(self, store: Any) -> None:
            self._store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self._store, name)

        async def delete_response(self, tenant: str, response_id: str) -> bool:
            raise StoreFailure("down")

    runtime.store = DeletesFail(runtime.store)  # type: ignore[assignment]
    deleted = await client.delete("/v1/responses/resp_own", headers=ALICE)
    assert deleted.status_code == 200
    assert deleted.json()["deleted"] is True
    metrics = (await client.get("/metrics")).text
    assert 'op="responses",result="error"' in metrics
