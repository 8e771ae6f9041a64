"""What the admin token does on the conversations and profiles APIs, as an
operator meets it: one conversation is read or deleted by naming its tenant
(without one, a 400 that says how, not a 404 that reads as "no such
conversation"), and the admin's profile writes say `admin` in their access
lines."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy
from tests.stores.servers import wait_until

ADMIN = {"Authorization": "Bearer admin-token-for-admin-requests"}
KEY = {"Authorization": "Bearer sk-admin-requests-client"}


def config(upstream: FakeUpstream) -> dict[str, object]:
    return route_config(upstream, top={"server": {"admin_token": ADMIN["Authorization"][7:]}})


def test_the_admin_names_the_tenant_of_one_conversation(upstream: FakeUpstream) -> None:
    with running_proxy(config(upstream)) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        sent = httpx.post(
            f"{proxy.url}/chat/completions",
            json=body,
            headers={**KEY, "X-Conversation-Id": "admin-1"},
        )
        assert sent.status_code == 200
        (listed,) = httpx.get(f"{proxy.url}/conversations", headers=ADMIN).json()["data"]
        assert listed["id"] == "admin-1"
        url = f"{proxy.url}/conversations/admin-1"

        for method in ("GET", "DELETE"):
            unnamed = httpx.request(method, url, headers=ADMIN)
            assert unnamed.status_code == 400, method
            error = unnamed.json()["error"]
            assert error["code"] == "tenant_required"
            assert error["param"] == "tenant"
            assert "?tenant=" in error["message"]

        named = httpx.get(url, params={"tenant": listed["tenant"]}, headers=ADMIN)
        assert named.status_code == 200
        assert len(named.json()["turns"]) == 1
        assert httpx.get(url, params={"tenant": "t-other"}, headers=ADMIN).status_code == 404
        gone = httpx.delete(url, params={"tenant": listed["tenant"]}, headers=ADMIN)
        assert gone.status_code == 204
        # a tenant still gets the same 404 for an unknown id as before
        assert httpx.get(url, headers=KEY).status_code == 404


def test_profile_writes_with_the_admin_token_log_the_admin(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "proxy.request"]

    with running_proxy(config(upstream)) as proxy:
        url = f"{proxy.url}/reasoning/profiles/terse"
        for method, headers, status in (
            ("PUT", ADMIN, 200),
            ("DELETE", ADMIN, 204),
            ("PUT", KEY, 403),
        ):
            seen = len(lines())
            kwargs = {"json": {"effort": "low"}} if method == "PUT" else {}
            r = httpx.request(method, url, headers=headers, **kwargs)  # type: ignore[arg-type]
            assert r.status_code == status
            wait_until(lambda s=seen: len(lines()) > s, what=f"{method}'s access line")
            tenant = getattr(lines()[-1], "tenant", None)
            assert tenant == ("admin" if headers is ADMIN else None), method
