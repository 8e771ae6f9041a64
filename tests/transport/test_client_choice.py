"""`server.upstream_client` picks the transport, and the proxy streams
through either; `aiohttp` without the aiohttp package stops start-up with
one clear line and exit status 2, before anything listens (with one worker
and with several)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from proxy.app import create_app
from proxy.config import ServerModel, build_config
from proxy.errors import ConfigError
from proxy.upstream import open_transport
from proxy.upstream.aio import AiohttpTransport
from proxy.upstream.builtin import BuiltinTransport
from tests.casefiles import chunk, read_stream
from tests.harness import FakeUpstream, Stream, free_port, route_config, running_proxy

MISSING = (
    "reasoning-proxy: server.upstream_client is aiohttp, but the aiohttp package is not "
    "installed: pip install 'reasoning-proxy[aiohttp]'\n"
)
ROOT = Path(__file__).resolve().parents[2]
TRANSPORTS = {"builtin": BuiltinTransport, "aiohttp": AiohttpTransport}


def test_the_config_key_picks_the_transport() -> None:
    assert isinstance(open_transport(ServerModel()), BuiltinTransport)
    assert isinstance(open_transport(ServerModel(upstream_client="builtin")), BuiltinTransport)
    assert isinstance(open_transport(ServerModel(upstream_client="aiohttp")), AiohttpTransport)


def test_an_unknown_client_is_a_config_error() -> None:
    data = {
        "server": {"upstream_client": "curl"},
        "routes": [{"name": "r", "upstream": "http://x/v1"}],
    }
    with pytest.raises(ConfigError, match=r"server\.upstream_client"):
        build_config(data, env={})


def test_create_app_refuses_aiohttp_when_it_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # `import aiohttp` raises ImportError
    data = {
        "server": {"upstream_client": "aiohttp"},
        "routes": [{"name": "r", "upstream": "http://x/v1"}],
    }
    config = build_config(data, env={"REASONING_PROXY_SECRET": "s"})
    with pytest.raises(ConfigError, match="not installed"):
        create_app(config)


def serve_without_aiohttp(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    config = {
        "server": {"upstream_client": "aiohttp", "port": port},
        "store": {"url": f"sqlite:///{tmp_path}/history.db"},
        "routes": [{"name": "r", "upstream": "http://127.0.0.1:9/v1"}],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code = (
        "import sys; sys.modules['aiohttp'] = None; from proxy.cli import main; "
        f"sys.exit(main(['serve', '--config', {str(tmp_path / 'config.yaml')!r}, *sys.argv[1:]]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"REASONING_PROXY_SECRET": "s", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["one-worker", "two-workers"])
def test_serve_without_aiohttp_exits_2_with_one_line(tmp_path: Path, workers: list[str]) -> None:
    done = serve_without_aiohttp(tmp_path, *workers)
    assert done.returncode == 2
    assert done.stderr == MISSING
    assert "listening" not in done.stdout


@pytest.mark.parametrize("client", ["builtin", "aiohttp"])
def test_the_proxy_streams_through_either_client(upstream: FakeUpstream, client: str) -> None:
    upstream.script(
        Stream([chunk({"role": "assistant", "content": "<think>hm</think>Hi"}), chunk({}, "stop")])
    )
    data = route_config(upstream, top={"server": {"upstream_client": client}})
    with running_proxy(data) as proxy:
        assert isinstance(proxy.runtime.upstream.transport, TRANSPORTS[client])
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]},
            headers={"Authorization": "Bearer sk-test"},
            timeout=30,
        )
    assert r.status_code == 200
    stream = read_stream(r.content)
    assert (stream["content"], stream["reasoning"], stream["done"]) == ("Hi", "hm", True)
    [sent] = upstream.chat_requests()
    assert sent.headers["accept-encoding"] == "gzip, deflate"
    # the client's own User-Agent, once: the transport adds none of its own
    assert sent.headers.getall("user-agent") == [f"python-httpx/{httpx.__version__}"]
