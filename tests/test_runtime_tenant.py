"""The runtime's tenant of a key: remembered for keys of a real key's
length, computed afresh for longer ones so the memory stays bounded."""

from __future__ import annotations

from proxy.config import Secret, build_config
from proxy.history.keys import tenant_of
from proxy.runtime import REMEMBERED_KEY, Runtime

ROUTES = {"routes": [{"name": "r", "models": ["*"], "upstream": "http://127.0.0.1:9/v1"}]}
SECRET = "tenant-secret"


def runtime() -> Runtime:
    config = build_config(ROUTES, env={"REASONING_PROXY_SECRET": SECRET})
    assert config.secret == Secret(SECRET)
    return Runtime(config)


def test_short_keys_are_remembered_long_ones_are_not() -> None:
    rt = runtime()
    short = "Bearer sk-" + "a" * 40
    assert rt.tenant(short) == tenant_of(SECRET.encode(), short)
    assert rt.tenant(short) == rt.tenant(short)
    remembered = rt._tenant.cache_info().currsize
    assert remembered == 1
    longs = [f"Bearer sk-{i}-" + "b" * (REMEMBERED_KEY * 8) for i in range(50)]
    tenants = {rt.tenant(key) for key in longs}
    # each long key is still its own tenant, the same one every time
    assert len(tenants) == 50
    assert [rt.tenant(key) for key in longs] == [tenant_of(SECRET.encode(), k) for k in longs]
    assert rt._tenant.cache_info().currsize == remembered
