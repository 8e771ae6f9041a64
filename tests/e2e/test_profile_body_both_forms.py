"""`PUT /v1/reasoning/profiles/{name}` through the real proxy: the body is
the settings, or the same under `settings`; a body with both would lose
what stands beside `settings`, so it is a 400 and nothing is stored."""

from __future__ import annotations

import httpx

from tests.harness import FakeUpstream, route_config, running_proxy

ADMIN = {"Authorization": "Bearer adm-9"}


def test_settings_beside_top_level_settings_are_refused(upstream: FakeUpstream) -> None:
    config = route_config(upstream, top={"server": {"admin_token": "adm-9"}})
    with running_proxy(config) as proxy:
        base = f"{proxy.url}/reasoning/profiles"
        mixed = httpx.put(
            f"{base}/mixed",
            json={"effort": "low", "settings": {"strip_from_context": "all"}},
            headers=ADMIN,
        )
        missing = httpx.get(f"{base}/mixed")
        nested = httpx.put(f"{base}/nested", json={"settings": {"effort": "low"}}, headers=ADMIN)
        flat = httpx.put(f"{base}/flat", json={"effort": "low"}, headers=ADMIN)
    assert mixed.status_code == 400
    assert mixed.json()["error"]["param"] == "settings"
    assert mixed.json()["error"]["code"] == "invalid_reasoning_setting"
    assert missing.status_code == 404
    assert nested.json()["settings"] == flat.json()["settings"] == {"effort": "low"}
