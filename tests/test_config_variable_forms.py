"""A config file expands `${VAR}` and `${VAR:-default}`; any other `${`
(a shell's `${VAR:?message}` or `${VAR-default}`, an unclosed `${VAR`, one
inside a default) stops `serve` and `check-config` with one line naming the
key and the variable, exit status 2. It used to stay in the value as text:
`api_key: ${OPENAI_API_KEY:?set it}` passed `check-config`, and every
request went upstream with that text as its key."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream, free_port
from tests.stores.servers import ProxyProcess
from tests.test_startup import assert_refused, run


def write(tmp_path: Path, upstream: str, api_key: str) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        f"routes:\n  - name: main\n    upstream: {upstream}\n    api_key: {json.dumps(api_key)}\n"
    )
    return path


@pytest.mark.parametrize(
    "written",
    [
        "${ROUTE_KEY:?set ROUTE_KEY}",
        "${ROUTE_KEY-sk-fallback}",
        "${ROUTE_KEY",
        "${X:-${ROUTE_KEY}}",
    ],
)
def test_a_form_that_is_not_expanded_stops_check_config_and_serve(
    tmp_path: Path, written: str
) -> None:
    config = write(tmp_path, "http://127.0.0.1:9/v1", written)
    extra = {"ROUTE_KEY": "sk-route-key-0123456789"}
    says = "routes[0].api_key: ${ROUTE_KEY...} is not expanded: only ${ROUTE_KEY} and"
    line = assert_refused(run("check-config", str(config), extra_env=extra), says)
    served = run("serve", "--config", str(config), "--port", str(free_port()), extra_env=extra)
    assert assert_refused(served) == line
    assert served.stdout == ""


def test_the_expanded_forms_reach_the_upstream(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = write(tmp_path, upstream.url, "${ROUTE_KEY:-sk-default-0123456789}")
    extra = {"ROUTE_KEY": "sk-route-key-0123456789"}
    process = ProxyProcess(["--config", str(config)], log=tmp_path / "proxy.log", env=extra)
    with process as proxy:
        assert httpx.get(proxy.url + "/models", timeout=10).status_code == 200
    (seen,) = [r for r in upstream.requests if r.path == "/v1/models"]
    assert seen.headers["authorization"] == "Bearer sk-route-key-0123456789"
