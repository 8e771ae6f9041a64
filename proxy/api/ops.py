"""Operational endpoints: liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from proxy.runtime import STORE_TIMEOUT, Runtime
from proxy.stores.base import StoreFailure


def ops_router(rt: Runtime) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        try:
            ok = await asyncio.wait_for(rt.store.ping(), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure):
            ok = False
        body = {
            "status": "ready" if ok else "degraded",
            "store": "ok" if ok else "down",
            "store_kind": rt.store.name,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    return router
