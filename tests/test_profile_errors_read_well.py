"""Profile errors say what is wrong. A YAML profile named `off`, `on`, `yes`
or `no` is a boolean to YAML 1.1, not a name: `check-config` says so and
how to write it (it said `profiles[0].[key]: Input should be a valid
string`). Through a real server, `PUT /v1/reasoning/profiles/{name}` with
`null` for a setting that cannot be unset says it cannot be null (it said
"must be one of: true, false, not null"), and a setting given under its
name and its alias names that setting as `param` (it was null)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy

ADMIN = "admin-token-for-profile-errors"
ROUTES = "routes: [{name: a, upstream: 'http://127.0.0.1:35999/v1'}]\n"


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "read_as", "spellings", "example"),
    [
        ("off", "false", "off, no, false", "off"),
        ("no", "false", "off, no, false", "off"),
        ("on", "true", "on, yes, true", "on"),
        ("Yes", "true", "on, yes, true", "on"),
    ],
)
def test_a_profile_name_read_as_a_boolean_is_named(
    tmp_path: Path, name: str, read_as: str, spellings: str, example: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(ROUTES + f"profiles:\n  {name}:\n    enabled: false\n  fast: {{effort: low}}\n")
    done = check_config(path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"  profiles: a profile name is read as the boolean {read_as} (YAML reads unquoted "
        f'{spellings} so): quote it ("{example}", not {example})'
    )
    assert "[key]" not in done.stderr
    path.write_text(ROUTES + f'profiles:\n  "{name}":\n    enabled: false\n')
    assert check_config(path).returncode == 0


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyServer]:
    upstream = FakeUpstream().start()
    try:
        with running_proxy(
            route_config(upstream), env={"REASONING_PROXY_ADMIN_TOKEN": ADMIN}
        ) as server:
            yield server
    finally:
        upstream.stop()


def put(proxy: ProxyServer, body: object) -> dict[str, object]:
    r = httpx.put(
        f"{proxy.url}/reasoning/profiles/p",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    error: dict[str, object] = r.json()["error"]
    assert error["code"] == "invalid_reasoning_setting"
    return error


def test_null_for_a_setting_that_cannot_be_unset_says_so(proxy: ProxyServer) -> None:
    error = put(proxy, {"enabled": None})
    assert error["message"] == (
        "settings.enabled cannot be null (leave it out to not set it); "
        "it must be one of: true, false"
    )
    assert error["param"] == "enabled"


@pytest.mark.parametrize(
    ("body", "field", "alias"),
    [
        ({"max_tokens": 5, "maxTokens": 6}, "max_tokens", "maxTokens"),
        (
            {"settings": {"includeInResponse": True, "include_in_response": True}},
            "include_in_response",
            "includeInResponse",
        ),
    ],
)
def test_a_setting_given_with_its_alias_is_named_as_param(
    proxy: ProxyServer, body: dict[str, object], field: str, alias: str
) -> None:
    error = put(proxy, body)
    assert (
        error["message"]
        == f"settings: {field} is given twice (as {field} and {alias}): give it once"
    )
    assert error["param"] == field
    assert httpx.get(f"{proxy.url}/reasoning/profiles/p", timeout=10).status_code == 404
