"""`reasoning-proxy demo`: the proxy in front of its own simulated upstream.

One process serves both: the proxy, and the simulator mounted at
`/demo-upstream`. Each demo model gets a route with the dialect of the
provider it imitates, whose upstream is the mounted simulator reached over
HTTP, so a request takes exactly the path it takes in production (through the
upstream client, the normalizer and the store). Nothing needs a key or the
network.

`reasoning-proxy demo --simulator-only` serves the simulator alone (at `/v1`,
default port 8788), so that `reasoning-proxy serve --upstream <its URL>` can
be tried as against a real provider: the one-line path, no config file.
"""

from __future__ import annotations

import argparse
import os
import secrets
import textwrap
from collections.abc import Mapping
from typing import Any

from proxy.config import ENV_SECRET, ENV_STORE, Config, build_config, with_overrides
from proxy.demo.simulator import DEFAULT_DELAY, Simulator
from proxy.demo.wire import FINGERPRINT, MODELS
from proxy.errors import ConfigError

MOUNT = "/demo-upstream"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
SIMULATOR_PORT = 8788  # beside a proxy on the default port
ENV_DELAY_MS = "REASONING_PROXY_DEMO_DELAY_MS"  # milliseconds between stream events

# How the proxy treats each simulated provider: the dialect of the provider it
# imitates, plus what that provider needs (see config/ for the real ones).
DEMO_ROUTES: dict[str, dict[str, Any]] = {
    "demo-deepseek": {"dialect": "deepseek"},
    # Kimi refuses tool-call turns without their reasoning: the dialect's
    # `include_in_context: auto` (the default) sends it back there.
    "demo-kimi": {"dialect": "kimi"},
    # These three take reasoning back in their own shape, not reasoning_content.
    "demo-openrouter": {"dialect": "openrouter", "reasoning": {"format": "native"}},
    "demo-vllm": {"dialect": "vllm", "reasoning": {"format": "native"}},
    "demo-minimax": {"dialect": "minimax", "reasoning": {"format": "native"}},
    # The chat template opened <think> in the prompt: text before </think> is reasoning.
    "demo-qwen": {"dialect": "openai", "implicit_open_tag": True},
    # Groq rejects reasoning in the input; the dialect never sends it.
    "demo-groq": {"dialect": "groq"},
}


def connect_host(host: str) -> str:
    """The address to reach a server listening on `host` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def url_host(host: str) -> str:
    host = connect_host(host)
    return f"[{host}]" if ":" in host else host


def demo_config_data(
    host: str, port: int, *, store: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The demo's config file, as data."""
    env = os.environ if env is None else env
    upstream = f"http://{url_host(host)}:{port}{MOUNT}/v1"
    routes: list[dict[str, Any]] = [
        {"name": model, "models": [model], "upstream": upstream, **settings}
        for model, settings in DEMO_ROUTES.items()
    ]
    # A request without a model (GET /v1/models) goes to the catch-all route,
    # so the simulator's model list is what clients see.
    routes.append({"name": "demo", "models": ["*"], "upstream": upstream})
    server: dict[str, Any] = {"host": host, "port": port}
    store_url = store or "memory://"
    if ENV_SECRET not in env and store_url.startswith("memory"):
        # Nothing the proxy keeps outlives the process with a memory store, so
        # a fresh tenant secret loses nothing there (and spares the newcomer a
        # warning); sealed reasoning a client holds warns on its first seal.
        server["secret"] = secrets.token_urlsafe(32)
    # the demo shows the whole exchange, prompts included (serve: off by default)
    ui = {"show_prompts": True}
    return {"server": server, "store": {"url": store_url}, "ui": ui, "routes": routes}


def build_demo_config(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    store: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """The demo's Config (validated like any config file), without running it."""
    data = demo_config_data(host, port, store=store, env=env)
    return build_config(data, env=env, source="reasoning-proxy demo")


def banner(config: Config) -> str:
    """What the demo prints before it serves."""
    base = f"http://{url_host(config.server.host)}:{config.server.port}"
    width = max(len(m) for m in MODELS)
    models = "\n".join(f"  {m.id:<{width}}  {m.imitates}" for m in MODELS.values())
    curl = (
        f"curl -sN {base}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        '    -d \'{"model": "demo-minimax", "stream": true, '
        '"messages": [{"role": "user", "content": "What is 17 * 23?"}]}\''
    )
    python = textwrap.dedent(
        f"""\
        from openai import OpenAI
        client = OpenAI(base_url="{base}/v1", api_key="demo")
        reply = client.chat.completions.create(
            model="demo-deepseek", messages=[{{"role": "user", "content": "What is 17 * 23?"}}]
        )
        print(reply.choices[0].message.model_extra["reasoning_content"])  # the reasoning
        print(reply.choices[0].message.content)  # the answer alone"""
    )
    return "\n".join(
        [
            "reasoning-proxy demo",
            "",
            "  The upstream is a SIMULATED model built into this process: canned answers in",
            "  each provider's real wire format, no network, no API keys. Every response",
            f'  carries system_fingerprint "{FINGERPRINT}".',
            "",
            f"  Base URL:   {base}/v1",
            f"  Inspector:  {base}/ui",
            f"  Simulator:  {base}{MOUNT}/v1",
            "              (call it directly to see the provider errors the proxy prevents)",
            "",
            "Models (one per upstream dialect):",
            models,
            "",
            "Try it with curl:",
            "  " + curl,
            "",
            "or with the openai SDK (pip install openai):",
            textwrap.indent(python, "  "),
            "",
            "  Requests without a key show in the inspector at once; requests with a key",
            '  (api_key="demo" above) show after you enter that key on the page.',
            "",
        ]
    )


def _delay(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_DELAY_MS)
    if raw is None:
        return DEFAULT_DELAY
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10_000:
        raise ConfigError(f"{ENV_DELAY_MS} must be a number of milliseconds from 0 to 10000")
    return value / 1000


def run_demo(args: argparse.Namespace) -> None:
    from proxy import serving
    from proxy.app import create_app
    from proxy.observability import configure_logging

    env = dict(os.environ)
    host = args.host or DEFAULT_HOST
    delay = _delay(env)
    # bound before the config is built: `--port 0` then names the real port
    # (the routes must point at it)
    sock = serving.listen(host, DEFAULT_PORT if args.port is None else args.port)
    try:
        port = int(sock.getsockname()[1])
        config = build_demo_config(host, port, store=args.store or env.get(ENV_STORE), env=env)
        config = with_overrides(
            config,
            log_level=args.log_level,
            log_format=args.log_format,
            log_bodies=args.log_bodies,
        )
        drawn = ENV_SECRET not in env and config.store.url.startswith("memory")
        app = create_app(config, mounts={MOUNT: Simulator(delay=delay)}, secret_drawn=drawn)
        configure_logging(config.server.log_level, config.server.log_format, config.secret_values())
        print(banner(config), flush=True)
        # Ctrl-C drains like `serve` (a second Ctrl-C cuts the streams left)
        serving.run(
            app,
            sockets=[sock],
            log_level=config.server.log_level,
            access_log=False,
            proxy_headers=False,
            log_config=None,
        )
    finally:
        sock.close()


def simulator_banner(url: str) -> str:
    """What `demo --simulator-only` prints before it serves."""
    width = max(len(m) for m in MODELS)
    models = "\n".join(f"  {m.id:<{width}}  {m.imitates}" for m in MODELS.values())
    return "\n".join(
        [
            "reasoning-proxy demo simulator",
            "",
            "  A SIMULATED upstream: canned answers in each provider's real wire format,",
            f'  no network, no API keys; every response carries "{FINGERPRINT}".',
            "",
            f"  Base URL:  {url}",
            "",
            "Put the proxy in front of it (no config file: the dialect comes from the",
            "model name, e.g. demo-kimi is Kimi's):",
            f"  reasoning-proxy serve --upstream {url}",
            "",
            "Models:",
            models,
            "",
        ]
    )


def run_simulator(args: argparse.Namespace) -> None:
    """Serve the simulated upstream alone, at /v1."""
    import uvicorn

    from proxy.observability import configure_logging
    from proxy.serving import listen

    env = dict(os.environ)
    host = args.host or DEFAULT_HOST
    delay = _delay(env)
    sock = listen(host, SIMULATOR_PORT if args.port is None else args.port)
    try:
        port = int(sock.getsockname()[1])
        level = args.log_level or "info"
        configure_logging(level, args.log_format or "json", [])
        print(simulator_banner(f"http://{url_host(host)}:{port}/v1"), flush=True)
        config = uvicorn.Config(
            Simulator(delay=delay),
            log_level=level,
            access_log=False,
            proxy_headers=False,
            log_config=None,
            timeout_graceful_shutdown=1,
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
