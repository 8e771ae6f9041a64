"""GET|PUT|DELETE /v1/reasoning/profiles/{name}: named reasoning settings.

Profiles from the config file are read-only; profiles written here are kept
in the store (so replicas sharing a store share them). Writing needs the
admin token.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from proxy.api.conversations import caller_tenant, require_admin
from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.exchange import parse_json_object
from proxy.runtime import Runtime
from proxy.settings import config_overrides

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def profiles_router(rt: Runtime) -> APIRouter:
    router = APIRouter()

    def check_name(name: str) -> None:
        if not _NAME.fullmatch(name):
            raise BadRequest(
                "A profile name is 1-64 of A-Z a-z 0-9 . _ -",
                param="name",
                code="invalid_profile_name",
            )

    async def stored(name: str) -> dict[str, Any] | None:
        with rt.health.errors("profile"):
            return await rt.store.get_profile(name)

    @router.get("/v1/reasoning/profiles")
    async def list_profiles(request: Request) -> dict[str, Any]:
        caller_tenant(rt, request)
        with rt.health.errors("profile"):
            saved = await rt.store.list_profiles()
        data = [
            {"name": n, "settings": dict(v), "source": "config"}
            for n, v in rt.config.profiles.items()
        ]
        data += [
            {"name": n, "settings": v, "source": "store"}
            for n, v in saved.items()
            if n not in rt.config.profiles
        ]
        return {"object": "list", "data": data}

    @router.get("/v1/reasoning/profiles/{name}")
    async def get_profile(request: Request, name: str) -> dict[str, Any]:
        caller_tenant(rt, request)
        check_name(name)
        if name in rt.config.profiles:
            return {"name": name, "settings": dict(rt.config.profiles[name]), "source": "config"}
        values = await stored(name)
        if values is None:
            raise NotFound("No profile with that name.", param="name", code="unknown_profile")
        return {"name": name, "settings": values, "source": "store"}

    @router.put("/v1/reasoning/profiles/{name}")
    async def put_profile(request: Request, name: str) -> dict[str, Any]:
        require_admin(rt, request)
        check_name(name)
        if name in rt.config.profiles:
            raise Forbidden(
                "Profiles from the config file are read-only.", code="profile_read_only"
            )
        body = parse_json_object(await request.body())
        settings = body.get("settings", body)
        if settings is not body and len(body) > 1:  # what stands beside it would be lost
            raise BadRequest(
                "Give the settings at the top level or under settings, not both.",
                code="invalid_reasoning_setting",
                param="settings",
            )
        if not isinstance(settings, dict):
            raise BadRequest("settings must be an object.", param="settings")
        try:
            values = config_overrides(settings, "settings")
        except ValueError as exc:
            param = getattr(exc, "param", None)
            raise BadRequest(str(exc), code="invalid_reasoning_setting", param=param) from None
        with rt.health.errors("profile"):
            await rt.store.put_profile(name, values)
        return {"name": name, "settings": values, "source": "store"}

    @router.delete("/v1/reasoning/profiles/{name}")
    async def delete_profile(request: Request, name: str) -> Response:
        require_admin(rt, request)
        check_name(name)
        if name in rt.config.profiles:
            raise Forbidden(
                "Profiles from the config file are read-only.", code="profile_read_only"
            )
        with rt.health.errors("profile"):
            deleted = await rt.store.delete_profile(name)
        if not deleted:
            raise NotFound("No profile with that name.", param="name", code="unknown_profile")
        return Response(status_code=204)

    return router
