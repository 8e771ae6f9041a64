"""An empty listen address stops `serve` and `check-config` with one line
and exit status 2. It used to be taken as the wildcard address: `serve
--host "$HOST"` with `HOST` unset, or `host: ${HOST:-}` in a file, listened
on every interface of the machine, under a banner that read
`http://:8787`. Every interface is asked for by name: 0.0.0.0 or ::."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import free_port
from tests.test_startup import UPSTREAM, assert_refused, run

SAYS = "0.0.0.0 or :: listens on every interface"


@pytest.mark.parametrize("host", ["", " ", "127.0.0.1 ", "[::1]"])
def test_serve_refuses_a_listen_address_that_is_no_address(host: str) -> None:
    result = run("serve", "--upstream", UPSTREAM, "--host", host, "--port", str(free_port()))
    line = assert_refused(result, "--host:", SAYS)
    assert result.stdout == ""  # no banner: nothing listened
    assert line.count("\n") == 0


def test_a_file_whose_host_comes_out_empty_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"server:\n  host: ${{LISTEN_HOST:-}}\nroutes:\n  - name: main\n    upstream: {UPSTREAM}\n"
    )
    checked = run("check-config", str(config))
    assert checked.returncode == 2
    assert f"server.host: must be an IP address or a host name ({SAYS}" in checked.stderr
    assert "Traceback" not in checked.stderr
    served = run("serve", "--config", str(config), "--port", str(free_port()))
    assert served.returncode == 2
    assert served.stdout == ""
    assert "server.host:" in served.stderr
    # the wildcard and names, asked for by name, are taken
    for host in ("0.0.0.0", "::", "localhost"):
        ok = run("check-config", str(config), extra_env={"LISTEN_HOST": host})
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["server"]["host"] == host
