"""Operational endpoints: what this server is (`/`), liveness, readiness and
Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from proxy import package_version
from proxy.history.service import STORE_TIMEOUT
from proxy.runtime import Runtime
from proxy.stores.base import StoreFailure


def ops_router(rt: Runtime) -> APIRouter:
    router = APIRouter()

    @router.api_route("/", methods=["GET", "HEAD"])
    async def root() -> dict[str, str]:
        """What answers here (clients such as Claude Code check `HEAD /`)."""
        return {
            "name": "reasoning-proxy",
            "version": package_version(),
            "api": "/v1",
            "inspector": "/ui",
        }

    @router.api_route("/healthz", methods=["GET", "HEAD"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.api_route("/readyz", methods=["GET", "HEAD"])
    async def readyz() -> JSONResponse:
        if rt.draining:
            # out of the load balancer's rotation while in-flight requests finish
            return JSONResponse(
                {"status": "shutting_down", "store_kind": rt.store.name},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        ok = await rt.check_store()
        body = {
            "status": "ready" if ok and not rt.secret_pending else "degraded",
            "store": "ok" if ok else "down",
            "store_kind": rt.store.name,
        }
        state = rt.secret_state
        if state is not None:
            # "pending": the store's tenant secret is not known yet; "conflict":
            # the store keeps another one. Either way a key is not the tenant
            # here that it is on the other processes of this store
            body["secret"] = state
        return JSONResponse(body, status_code=200 if body["status"] == "ready" else 503)

    @router.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics(request: Request) -> Response:
        try:
            stats = await asyncio.wait_for(rt.store.stats(), STORE_TIMEOUT)
            rt.metrics.store_conversations.set(stats.conversations)
            rt.metrics.store_bytes.set(stats.bytes)
            rt.health.counted("stats")
        except (TimeoutError, StoreFailure) as exc:
            rt.health.failed("stats", exc)
        # read now, not counted per request (with --workers: see Runtime)
        rt.metrics.upstream_load(rt.upstream.in_flight, rt.upstream.waiting)
        body, content_type = rt.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    return router
