"""The command line: `reasoning-proxy serve | demo | check-config | store migrate`."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from proxy import package_version
from proxy.config import (
    ENV_CONFIG,
    ENV_DIALECT,
    ENV_IMPLICIT_OPEN_TAG,
    ENV_STORE,
    ENV_UPSTREAM,
    Config,
    Secret,
    describe,
    load_serve_config,
    upstream_config,
    with_overrides,
)
from proxy.dialects import DIALECT_NAMES
from proxy.errors import ConfigError
from proxy.stores import check_store, store_kind

log = logging.getLogger("proxy")


def _bounded(low: int, high: int) -> Any:
    """An argparse type: an integer from `low` to `high` (the config file's
    bounds for the same setting), else argparse's one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value

    return parse


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_bounded(0, 65535), help="port to listen on (default 8787)")
    parser.add_argument(
        "--store",
        help="memory://, sqlite:///path.db, redis://host:port/db or redis+cluster://host:port[,host:port...]",
    )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="default info"
    )
    parser.add_argument("--log-format", choices=["json", "text"], help="default json")
    parser.add_argument(
        "--log-bodies",
        action="store_true",
        default=None,
        help="log request and response bodies (truncated, credentials redacted)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reasoning-proxy",
        description="OpenAI-compatible proxy that separates, stores and re-injects reasoning.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help=f"YAML config file (or ${ENV_CONFIG})")
    serve.add_argument("--upstream", help=f"one catch-all upstream base URL (or ${ENV_UPSTREAM})")
    serve.add_argument(
        "--dialect",
        choices=DIALECT_NAMES,
        metavar="NAME",
        help="the --upstream route's dialect: " + ", ".join(DIALECT_NAMES) + " (default auto: "
        f"from the upstream host, else per request from the model name; or ${ENV_DIALECT})",
    )
    serve.add_argument(
        "--implicit-open-tag",
        action="store_true",
        help="the --upstream model's prompt template opens <think> (DeepSeek-R1, QwQ, "
        "Qwen3 thinking models without a reasoning parser): replies start inside the "
        f"reasoning, ended by </think> (or ${ENV_IMPLICIT_OPEN_TAG}=1)",
    )
    serve.add_argument(
        "--workers",
        type=_bounded(1, 64),
        help="worker processes, 1 to 64 (above 1 needs sqlite or redis)",
    )
    _serve_options(serve)

    demo = commands.add_parser("demo", help="run with a built-in simulated upstream (no keys)")
    demo.add_argument(
        "--simulator-only",
        action="store_true",
        help="serve only the simulated upstream (default port 8788), for "
        "`reasoning-proxy serve --upstream <its URL>`",
    )
    _serve_options(demo)

    check = commands.add_parser("check-config", help="validate a config file and print it")
    check.add_argument("file", nargs="?", help=f"YAML config file (default: ${ENV_CONFIG})")

    store = commands.add_parser("store", help="maintain a store")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    migrate = store_commands.add_parser(
        "migrate", help="move a Redis store written by an earlier version to the current key names"
    )
    migrate.add_argument("--store", help=f"redis://host:port/db (or ${ENV_STORE})")
    return parser


def resolve_serve_config(args: argparse.Namespace, env: dict[str, str] | None = None) -> Config:
    env = dict(os.environ) if env is None else env
    path = args.config or env.get(ENV_CONFIG)
    upstream = args.upstream or env.get(ENV_UPSTREAM)
    if path and upstream:
        raise ConfigError(
            _both(
                "--config" if args.config else ENV_CONFIG,
                "--upstream" if args.upstream else ENV_UPSTREAM,
            )
        )
    dialect = getattr(args, "dialect", None)
    if path and dialect:
        raise ConfigError("--dialect goes with --upstream; a config file sets dialect: per route")
    implicit = getattr(args, "implicit_open_tag", False)
    if path and implicit:
        raise ConfigError(
            "--implicit-open-tag goes with --upstream; a config file sets implicit_open_tag: "
            "per route"
        )
    if path:
        config = load_serve_config(path, env)
    elif upstream:
        config = upstream_config(upstream, env, dialect, implicit)
    else:
        raise ConfigError(
            f"nothing to proxy to: pass --upstream URL or --config FILE "
            f"(or set {ENV_UPSTREAM} / {ENV_CONFIG})"
        )
    return with_overrides(config, **_overrides(args, env))


def _both(config_from: str, upstream_from: str) -> str:
    """The refusal of a config file beside an upstream URL, naming where
    each came from (a variable exported long ago reads like nothing given)."""
    variables = [
        name for name in (config_from, upstream_from) if name in (ENV_CONFIG, ENV_UPSTREAM)
    ]
    fix = f"unset {variables[0]}" if len(variables) == 1 else "give only one"
    return (
        f"{config_from} and {upstream_from} both say what to proxy to: a config file "
        f"or one upstream URL, not both ({fix})"
    )


def _overrides(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    return {
        "host": args.host,
        "port": args.port,
        "workers": getattr(args, "workers", None),
        "log_level": args.log_level,
        "log_format": args.log_format,
        "log_bodies": args.log_bodies,
        "store_url": args.store or env.get(ENV_STORE),
    }


def check_workers(config: Config) -> None:
    if config.server.workers > 1 and store_kind(config.store.url) == "memory":
        raise ConfigError(
            f"--workers {config.server.workers} needs a shared store: the memory store lives "
            "in one process, so each worker would see different history. Use "
            "--store sqlite:///path.db (one host) or --store redis://host:6379/0."
        )


def check_store_of(config: Config | None, args: argparse.Namespace) -> None:
    """check_store, its error naming where the URL came from: `--store`,
    REASONING_PROXY_STORE or the config file's `store.url`."""
    if getattr(args, "store", None):
        url, origin = args.store, "--store"
    elif os.environ.get(ENV_STORE):
        url, origin = os.environ[ENV_STORE], ENV_STORE
    elif config is not None:
        url, origin = config.store.url, f"{config.source}: store.url"
    else:
        url, origin = "memory://", "store"
    try:
        check_store(url)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def with_secret(config: Config) -> tuple[Config, bool]:
    """The config with a tenant secret: the configured one, else one drawn
    now (one per `serve`, shared by its workers). True when drawn."""
    if config.secret is not None:
        return config, False
    return replace(config, secret=Secret(secrets.token_urlsafe(32))), True


def banner(config: Config) -> str:
    """The line `serve` prints as it starts."""
    server = config.server
    host = f"[{server.host}]" if ":" in server.host else server.host  # an IPv6 address
    return (
        f"reasoning-proxy listening on http://{host}:{server.port} "
        f"({len(config.routes)} route(s), store {store_kind(config.store.url)}, "
        f"{server.workers} worker(s))"
    )


def serve(config: Config, args: argparse.Namespace) -> None:
    from proxy import serving
    from proxy.observability import configure_logging
    from proxy.upstream import check_client

    check_workers(config)
    check_store_of(config, args)
    check_client(config.server.upstream_client)
    config, drawn = with_secret(config)
    server = config.server
    configure_logging(server.log_level, server.log_format, config.secret_values())
    # bound before the banner: a busy port is one error line, not a banner
    # followed by uvicorn's log; `--port 0` then prints the port it got
    sock = serving.listen(server.host, server.port)
    try:
        port = int(sock.getsockname()[1])
        config = replace(config, server=server.model_copy(update={"port": port}))
        _serve_on(sock, config, args, drawn=drawn)
    finally:
        sock.close()


def _serve_on(
    sock: socket.socket, config: Config, args: argparse.Namespace, *, drawn: bool
) -> None:
    from proxy import serving
    from proxy.app import ENV_OVERRIDES, ENV_WORKER_SECRET, create_app
    from proxy.observability import MULTIPROC_ENV

    server = config.server
    print(banner(config), flush=True)
    common: dict[str, Any] = {
        "sockets": [sock],
        "host": server.host,
        "port": server.port,
        "log_level": server.log_level,
        "access_log": False,
        # no X-Forwarded-* rewriting: the client address is the peer's own
        # (the loop check compares it with the upstream connections')
        "proxy_headers": False,
        "log_config": None,  # our handler on the root logger (redacting) serves uvicorn too
    }
    if server.workers == 1:
        serving.run(create_app(config, secret_drawn=drawn), **common)
        return
    # Worker processes rebuild the config from the environment, and write
    # their metrics to files that /metrics aggregates.
    metrics_dir = tempfile.mkdtemp(prefix="reasoning-proxy-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    atexit.register(shutil.rmtree, metrics_dir, True)
    if args.config or os.environ.get(ENV_CONFIG):
        os.environ[ENV_CONFIG] = os.path.abspath(args.config or os.environ[ENV_CONFIG])
        os.environ.pop(ENV_UPSTREAM, None)
    else:
        os.environ[ENV_UPSTREAM] = args.upstream or os.environ[ENV_UPSTREAM]
        if args.dialect:
            os.environ[ENV_DIALECT] = args.dialect
        if args.implicit_open_tag:
            os.environ[ENV_IMPLICIT_OPEN_TAG] = "1"
    os.environ[ENV_OVERRIDES] = json.dumps(
        {k: v for k, v in _overrides(args, dict(os.environ)).items() if v is not None}
    )
    if drawn:
        assert config.secret is not None
        os.environ[ENV_WORKER_SECRET] = config.secret.get()
    else:
        os.environ.pop(ENV_WORKER_SECRET, None)
    serving.run("proxy.app:app_from_env", workers=server.workers, **common)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check-config":
            # what `serve --config FILE` would run (the file named, else the
            # one the environment names, as for `serve`): the environment's
            # store URL overrides the file's there, so it does here
            path = args.file or os.environ.get(ENV_CONFIG)
            if not path:
                raise ConfigError(f"check-config: name a config file, or set {ENV_CONFIG}")
            if os.environ.get(ENV_UPSTREAM):  # `serve` refuses the file beside it
                raise ConfigError(_both(args.file or ENV_CONFIG, ENV_UPSTREAM))
            config = with_overrides(load_serve_config(path), store_url=os.environ.get(ENV_STORE))
            from proxy.upstream import check_client

            # every check `serve` makes before it starts
            check_workers(config)
            check_store_of(config, args)
            check_client(config.server.upstream_client)
            print(json.dumps(describe(config), indent=2))
            print(f"{path}: OK", file=sys.stderr)
            return 0
        if args.command == "serve":
            serve(resolve_serve_config(args), args)
            return 0
        if args.command == "store":
            from proxy.stores.redis_migrate import migrate_command

            print(migrate_command(args.store or os.environ.get(ENV_STORE)))
            return 0
        if args.command == "demo":
            from proxy.demo.run import run_demo, run_simulator

            if args.simulator_only:
                run_simulator(args)
                return 0
            check_store_of(None, args)
            run_demo(args)
            return 0
    except ConfigError as exc:
        print(f"reasoning-proxy: {exc}", file=sys.stderr)
        return 2
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
