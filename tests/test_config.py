"""Config files: strict validation, environment expansion, routing, and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import banner, build_parser, check_workers, main, resolve_serve_config
from proxy.config import (
    Secret,
    build_config,
    describe,
    expand_env,
    load_config,
    with_overrides,
)
from proxy.errors import ConfigError, InvalidSetting
from proxy.settings import ReasoningSettings, config_overrides, header_overrides, resolve

UP = "http://127.0.0.1:9/v1"


def config(**top: Any) -> dict[str, Any]:
    return {"routes": [{"name": "r", "upstream": UP}], **top}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"routes": [{"name": "r", "upstream": UP, "typo": 1}]}, "routes[0].typo: unknown key"),
        ({**config(), "extra": 1}, "extra: unknown key"),
        ({"routes": []}, "routes"),
        ({"routes": [{"name": "r", "upstream": "ftp://x"}]}, "http:// or https://"),
        # a port urlsplit cannot read passed, then every request was a 500
        (
            {"routes": [{"name": "r", "upstream": "http://127.0.0.1:99999/v1"}]},
            "routes[0].upstream: must have a port from 1 to 65535",
        ),
        (
            {"routes": [{"name": "r", "upstream": "https://api.example:https/v1"}]},
            "routes[0].upstream: must have a port from 1 to 65535",
        ),
        (
            {"routes": [{"name": "r", "upstream": "http://127.0.0.1:0/v1"}]},
            "routes[0].upstream: must have a port from 1 to 65535",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP, "dialect": "bard"}]},
            "routes[0].dialect: must be one of: auto, openai, deepseek, kimi,",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP, "dialect": "atuo"}]},
            "must be one of: auto, openai",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP, "reasoning": {"effort": "max"}}]},
            "routes[0].reasoning.effort must be one of: none, minimal, low, medium, high, xhigh",
        ),
        (
            {
                "routes": [
                    {"name": "r", "upstream": UP, "reasoning": {"include_in_context": "atuo"}}
                ]
            },
            "routes[0].reasoning.include_in_context must be one of: auto, true, false",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP, "reasoning": {"include_in_context": None}}]},
            "routes[0].reasoning.include_in_context cannot be null (leave it out to not set it); "
            "it must be one of: auto, true, false",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP, "reasoning": {"bogus": 1}}]},
            "unknown reasoning setting 'bogus'",
        ),
        (
            {"routes": [{"name": "r", "upstream": UP}, {"name": "r", "upstream": UP}]},
            "route names must be unique: r",
        ),
        ({**config(), "profiles": {"bad name": {}}}, "profile name"),
        ({"routes": [{"name": "r", "upstream": UP, "tags": ["a b"]}]}, "routes[0].tags"),
        ({"routes": [{"name": "r", "upstream": UP, "headers": {"X": "a\nb"}}]}, "CR, LF"),
        ({**config(), "limits": {"max_body_bytes": 1}}, "limits.max_body_bytes"),
        ([1, 2], "must hold a mapping"),
        # the file's words, not pydantic's class names, and one line per mistake
        ({"routes": ["http://x/v1"]}, "  routes[0]: must be a mapping (key: value)\n"),
        ({**config(), "server": None}, "  server: must be a mapping (key: value)\n"),
        (
            {"routes": [{"name": "r", "upstream": UP, "tags": ["think", {"open": "<a>"}]}]},
            "invalid configuration\n  routes[0].tags[1]: must be a tag name, an {open, close} "
            "pair or a {preset} mapping\n",
        ),
    ],
)
def test_invalid_configs_say_where(data: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(data, env={})
    assert message in str(info.value) + "\n"
    assert "Model" not in str(info.value)


def test_env_expansion_and_secrets_stay_hidden() -> None:
    data = {
        "routes": [
            {"name": "r", "upstream": "${BASE:-http://127.0.0.1:1}/v1", "api_key": "${KEY}"}
        ],
        "server": {"admin_token": "${ADMIN}"},
    }
    cfg = build_config(data, env={"KEY": "sk-very-secret", "ADMIN": "adm"})
    assert cfg.routes[0].upstream == "http://127.0.0.1:1/v1"
    assert cfg.routes[0].api_key == Secret("sk-very-secret")
    assert cfg.admin_token is not None
    assert cfg.admin_token.get() == "adm"
    assert "sk-very-secret" not in repr(cfg)
    assert "adm" not in str(describe(cfg)).replace("admin", "")
    with pytest.raises(ConfigError, match="MISSING is not set"):
        expand_env({"a": ["${MISSING}"]}, {})


@pytest.mark.parametrize(
    ("env", "expanded"),
    [
        ({}, "8787"),
        # empty takes the default too, as `${PORT:-8787}` does in a shell and in
        # Compose (which may hand a container an empty variable for an unset one)
        ({"PORT": ""}, "8787"),
        ({"PORT": "9000"}, "9000"),
    ],
)
def test_a_default_stands_in_for_an_unset_or_empty_variable(
    env: dict[str, str], expanded: str
) -> None:
    assert expand_env({"port": "${PORT:-8787}"}, env) == {"port": expanded}
    assert expand_env({"key": "${KEY:-}"}, env) == {"key": ""}


def test_a_variable_without_a_default_must_not_be_empty() -> None:
    # an empty key made the route forward the clients' own keys upstream, and
    # an empty secret drew a random one, though the file asked for the variable
    data = {"routes": [{"name": "r", "upstream": UP, "api_key": "${KEY}"}]}
    with pytest.raises(ConfigError) as info:
        build_config(data, env={"KEY": ""}, source="c.yaml")
    assert str(info.value) == (
        "c.yaml: routes[0].api_key: environment variable KEY is empty (${KEY:-default} "
        "gives a default)"
    )
    with pytest.raises(ConfigError, match="SECRET is empty"):
        build_config({**config(), "server": {"secret": "${SECRET}"}}, env={"SECRET": ""})
    empty_allowed = {"routes": [{"name": "r", "upstream": UP, "api_key": "${KEY:-}"}]}
    assert build_config(empty_allowed, env={"KEY": ""}).routes[0].api_key is None


def test_routing_rules() -> None:
    cfg = build_config(
        {
            "routes": [
                {"name": "ds", "models": ["deepseek-*"], "upstream": UP},
                {"name": "all", "models": ["*"], "upstream": UP},
                {"name": "late", "models": ["deepseek-chat"], "upstream": UP},
            ]
        },
        env={},
    )
    assert cfg.route_for("deepseek-chat").name == "ds"  # type: ignore[union-attr]
    assert cfg.route_for("other").name == "all"  # type: ignore[union-attr]
    assert cfg.route_for(None).name == "all"  # type: ignore[union-attr]
    only = build_config({"routes": [{"name": "x", "models": ["a*"], "upstream": UP}]}, env={})
    assert only.route_for(None).name == "x"  # type: ignore[union-attr]
    assert only.route_for("b") is None


@pytest.mark.parametrize(
    ("route", "keyed"),
    [
        ({}, False),
        ({"api_key": "rk-1"}, True),
        ({"headers": {"Authorization": "Bearer rk-1"}}, True),
        ({"headers": {"API-Key": "rk-1"}}, True),  # names in any case
        ({"headers": {"x-api-key": "rk-1"}}, True),
        ({"headers": {"x-goog-api-key": "rk-1"}}, True),
        ({"headers": {"HTTP-Referer": "https://app.example", "X-Title": "app"}}, False),
    ],
)
def test_a_route_is_keyed_by_api_key_or_a_credential_header(
    route: dict[str, Any], keyed: bool
) -> None:
    cfg = build_config({"routes": [{"name": "r", "upstream": UP, **route}]}, env={})
    assert cfg.routes[0].keyed is keyed


def test_settings_aliases_and_precedence() -> None:
    assert config_overrides(
        {"includeInContext": "TRUE", "strip_from_context": "allbutlast"}, "x"
    ) == {"include_in_context": True, "strip_from_context": "allButLast"}
    with pytest.raises(ValueError, match="twice"):
        config_overrides({"maxTokens": 1, "max_tokens": 2}, "x")
    assert resolve({"effort": "low"}, None, {"effort": "high"}) == ReasoningSettings(effort="high")
    with pytest.raises(InvalidSetting, match="given twice"):
        header_overrides([("x-reasoning-effort", "low"), ("x-reasoning-effort", "high")])
    assert header_overrides([("x-reasoning-effort", "low"), ("x-reasoning-effort", "LOW")]) == {
        "effort": "low"
    }


def test_memory_store_with_workers_is_refused() -> None:
    cfg = build_config({**config(), "server": {"workers": 2}}, env={})
    with pytest.raises(ConfigError, match="needs a shared store"):
        check_workers(cfg)


def test_check_config_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "routes:\n  - name: r\n    upstream: http://127.0.0.1:9/v1\n    api_key: sk-hidden\n"
    )
    assert main(["check-config", str(good)]) == 0
    out = capsys.readouterr()
    assert '"dialect": "auto"' in out.out
    assert "per request from the model name (/kimi|moonshot/ -> kimi;" in out.out
    assert "sk-hidden" not in out.out + out.err
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes:\n  - name: r\n    upstream: http://x/v1\n    colour: red\n")
    assert main(["check-config", str(bad)]) == 2
    assert "routes[0].colour: unknown key" in capsys.readouterr().err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2
    (tmp_path / "broken.yaml").write_text("routes: [\n")
    assert main(["check-config", str(tmp_path / "broken.yaml")]) == 2
    assert load_config(good).routes[0].name == "r"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # YAML keeps the last of two equal keys: the first block was lost unsaid
        (
            "routes:\n  - {name: a, upstream: http://x/v1}\n"
            "routes:\n  - {name: b, upstream: http://y/v1}\n",
            "line 3, column 1: the key 'routes' is given twice (YAML would keep only the last)",
        ),
        (
            "routes:\n  - name: a\n    upstream: http://x/v1\n    upstream: http://y/v1\n",
            "line 4, column 5: the key 'upstream' is given twice (YAML would keep only the last)",
        ),
        (
            "routes:\n  - {name: a, upstream: http://x/v1\n",
            "line 3, column 1: expected ',' or '}', but got '<stream end>' "
            "(while parsing a flow mapping at line 2, column 5)",
        ),
    ],
)
def test_yaml_mistakes_are_one_line_naming_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: not valid YAML: {message}"


def test_a_merged_key_may_be_given_again(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "routes:\n  - &base {name: a, upstream: http://x/v1, models: [a]}\n"
        "  - <<: *base\n    name: b\n    models: [b]\n"
    )
    routes = load_config(path).routes
    assert [(r.name, r.upstream, r.models) for r in routes] == [
        ("a", "http://x/v1", ("a",)),
        ("b", "http://x/v1", ("b",)),
    ]


def test_python_dash_m_proxy_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "nothing to proxy to" in result.stderr


@pytest.mark.parametrize(
    ("upstream", "dialect", "source"),
    [
        ("https://api.deepseek.com", "deepseek", "host"),
        ("https://api.moonshot.ai/v1", "kimi", "host"),
        ("https://api.moonshot.cn/v1", "kimi", "host"),
        ("https://openrouter.ai/api/v1", "openrouter", "host"),
        ("https://api.groq.com/openai/v1", "groq", "host"),
        ("https://api.minimax.io/v1", "minimax", "host"),
        ("https://api.minimaxi.com/v1", "minimax", "host"),
        ("https://open.bigmodel.cn/api/paas/v4", "glm", "host"),
        ("https://api.z.ai/api/paas/v4", "glm", "host"),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "dashscope", "host"),
        ("https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "dashscope", "host"),
        ("https://api.x.ai/v1", "xai", "host"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "gemini", "host"),
        ("https://api.openai.com/v1", "openai", "host"),
        ("https://API.Together.xyz/v1", "together", "host"),
        ("https://api.fireworks.ai/inference/v1", "fireworks", "host"),
        ("http://127.0.0.1:8000/v1", "openai", "model"),
        ("https://deepseek.example.com/v1", "openai", "model"),  # only the real host counts
    ],
)
def test_a_route_without_dialect_takes_the_hosts(upstream: str, dialect: str, source: str) -> None:
    (route,) = build_config({"routes": [{"name": "r", "upstream": upstream}]}, env={}).routes
    assert (route.dialect.name, route.dialect_source) == (dialect, source)
    auto = build_config(
        {"routes": [{"name": "r", "upstream": upstream, "dialect": "auto"}]}, env={}
    ).routes[0]
    assert (auto.dialect, auto.dialect_source) == (route.dialect, route.dialect_source)
    explicit = build_config(
        {"routes": [{"name": "r", "upstream": upstream, "dialect": "groq"}]}, env={}
    ).routes[0]
    assert (explicit.dialect.name, explicit.dialect_source) == ("groq", "config")


def test_check_config_says_how_each_route_gets_its_dialect() -> None:
    cfg = build_config(
        {
            "routes": [
                {"name": "set", "models": ["a"], "upstream": UP, "dialect": "kimi"},
                {"name": "host", "models": ["b"], "upstream": "https://api.moonshot.ai/v1"},
                {"name": "multi", "models": ["c"], "upstream": "https://openrouter.ai/api/v1"},
                {"name": "open", "upstream": UP},
            ]
        },
        env={},
    )
    routes = {r["name"]: r for r in describe(cfg)["routes"]}
    assert routes["set"]["dialect"] == "kimi"
    assert routes["set"]["dialect_detection"] == "set in the config (kimi)"
    assert routes["host"]["dialect"] == "kimi"
    assert routes["host"]["dialect_detection"] == "from the upstream host api.moonshot.ai (kimi)"
    assert routes["multi"]["dialect"] == "openrouter"
    assert "where the model's maker needs it" in routes["multi"]["dialect_detection"]
    assert routes["open"]["dialect"] == "auto"
    assert routes["open"]["dialect_detection"].startswith("per request from the model name")
    assert routes["open"]["dialect_detection"].endswith("else openai")


def test_include_in_context_takes_auto_true_and_false() -> None:
    assert ReasoningSettings().include_in_context == "auto"
    assert config_overrides({"include_in_context": "AUTO"}, "x") == {"include_in_context": "auto"}
    assert config_overrides({"includeInContext": False}, "x") == {"include_in_context": False}
    assert header_overrides([("x-reasoning-include-in-context", " Auto ")]) == {
        "include_in_context": "auto"
    }
    with pytest.raises(InvalidSetting, match="must be one of: auto, true, false"):
        header_overrides([("x-reasoning-include-in-context", "yes")])


def test_serve_dialect_names_the_upstream_routes_dialect() -> None:
    parser = build_parser()

    def route(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, str]:
        (only,) = resolve_serve_config(parser.parse_args(argv), env=env or {}).routes
        return only.dialect.name, only.dialect_source

    moonshot = ["serve", "--upstream", "https://api.moonshot.ai/v1"]
    assert route(moonshot) == ("kimi", "host")
    assert route([*moonshot, "--dialect", "openai"]) == ("openai", "config")
    assert route([*moonshot, "--dialect", "auto"]) == ("kimi", "host")
    assert route(["serve", "--upstream", UP]) == ("openai", "model")
    assert route(["serve", "--upstream", UP], {"REASONING_PROXY_DIALECT": "kimi"}) == (
        "kimi",
        "config",
    )
    with pytest.raises(ConfigError, match="must be one of: auto, openai") as bad:
        route(["serve", "--upstream", UP], {"REASONING_PROXY_DIALECT": "kimmi"})
    assert "REASONING_PROXY_DIALECT=kimmi" in str(bad.value)  # the error names its source
    with pytest.raises(ConfigError, match="--dialect goes with --upstream"):
        route(["serve", "--config", "x.yaml", "--dialect", "kimi"])
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--upstream", UP, "--dialect", "kimmi"])

    def implicit(argv: list[str], env: dict[str, str] | None = None) -> bool:
        (only,) = resolve_serve_config(parser.parse_args(argv), env=env or {}).routes
        return only.implicit_open_tag

    assert implicit(["serve", "--upstream", UP]) is False
    assert implicit(["serve", "--upstream", UP, "--implicit-open-tag"]) is True
    assert implicit(["serve", "--upstream", UP], {"REASONING_PROXY_IMPLICIT_OPEN_TAG": "1"})
    with pytest.raises(ConfigError, match="--implicit-open-tag goes with --upstream"):
        implicit(["serve", "--config", "x.yaml", "--implicit-open-tag"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # uvicorn took 99999 and listened elsewhere; demo showed a traceback
        (["serve", "--upstream", UP, "--port", "99999"], "--port: must be from 0 to 65535"),
        (["demo", "--port", "-1"], "--port: must be from 0 to 65535"),
        (["serve", "--upstream", UP, "--port", "80a"], "--port: not a whole number"),
        # 0 workers ran one, 100 ran past the config file's limit of 64
        (["serve", "--upstream", UP, "--workers", "0"], "--workers: must be from 1 to 64"),
        (["serve", "--upstream", UP, "--workers", "65"], "--workers: must be from 1 to 64"),
    ],
)
def test_out_of_range_options_stop_with_a_usage_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)  # main() would go on to serve
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_options_are_checked_as_the_files_values_are() -> None:
    cfg = build_config(
        {**config(), "server": {"admin_token": "adm", "secret": "sec", "port": 9000}}, env={}
    )
    changed = with_overrides(cfg, port=9001, workers=2, log_level=None, store_url="memory://")
    assert (changed.server.port, changed.server.workers) == (9001, 2)
    assert changed.server.admin_token is not None
    assert changed.server.admin_token.get_secret_value() == "adm"
    with pytest.raises(ConfigError, match=r"^--port: Input should be less than or equal to 65535"):
        with_overrides(cfg, port=70000)
    with pytest.raises(ConfigError, match=r"^--log-level: Input should be"):
        with_overrides(cfg, log_level="loud")


def test_check_config_resolves_the_store_as_serve_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {workers: 2}\nroutes:\n  - {name: r, upstream: http://x/v1}\n")
    assert main(["check-config", str(path)]) == 2  # memory store, two workers
    assert "needs a shared store" in capsys.readouterr().err
    db = tmp_path / "rp.db"
    monkeypatch.setenv("REASONING_PROXY_STORE", f"sqlite:///{db}")
    assert main(["check-config", str(path)]) == 0
    assert f'"url": "sqlite:///{db}"' in capsys.readouterr().out
    monkeypatch.setenv("REASONING_PROXY_STORE", "postgres://db/0")
    assert main(["check-config", str(path)]) == 2
    assert "unknown store URL scheme 'postgres'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8787"),
        ("::", "http://[::]:8787"),  # was http://:::8787
        ("::1", "http://[::1]:8787"),
    ],
)
def test_the_serve_banner_writes_a_url(host: str, url: str) -> None:
    cfg = with_overrides(build_config(config(), env={}), host=host)
    assert banner(cfg) == (
        f"reasoning-proxy listening on {url} (1 route(s), store memory, 1 worker(s))"
    )


def test_check_config_refuses_an_upstream_client_that_is_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "server: {upstream_client: aiohttp}\nroutes:\n  - {name: r, upstream: " + UP + "}\n"
    )
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # `import aiohttp` fails
    assert main(["check-config", str(path)]) == 2  # as serve stops
    assert "the aiohttp package is not installed" in capsys.readouterr().err


def test_a_store_error_names_where_the_url_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("store: {url: 'postgres://db'}\nroutes:\n  - {name: r, upstream: " + UP + "}\n")
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"reasoning-proxy: {path}: store.url: unknown store")
    monkeypatch.setenv("REASONING_PROXY_STORE", "mysql://db")
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err.startswith("reasoning-proxy: REASONING_PROXY_STORE: unknown")
    assert main(["serve", "--upstream", UP, "--store", "foo://x"]) == 2
    assert capsys.readouterr().err.startswith("reasoning-proxy: --store: unknown store URL")


def test_check_config_says_where_an_unset_tenant_secret_comes_from() -> None:
    routes = {"routes": [{"name": "r", "models": ["*"], "upstream": "http://127.0.0.1:9/v1"}]}
    for url, said in (
        ("memory://", "<unset: random per start>"),
        ("sqlite:///h.db", "<unset: kept in the store>"),
        ("redis://127.0.0.1:6379/0", "<unset: kept in the store>"),
    ):
        config = build_config({**routes, "store": {"url": url}}, env={})
        assert describe(config)["server"]["secret"] == said
    configured = build_config(routes, env={"REASONING_PROXY_SECRET": "s3cret-value"})
    assert describe(configured)["server"]["secret"] == "<set>"
    assert "s3cret-value" not in str(describe(configured))


# -- config errors that were tracebacks or passed ---------------------------------


def test_check_config_refuses_null_for_a_setting_without_an_unset_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`output: null` passed (and chose the reasoning_details shape); now it
    is one line and exit status 2, as every other bad value."""
    cases = {
        "profiles: {p: {output: }}\n": "profiles.p.output cannot be null (leave it out to not "
        "set it); it must be one of: reasoning_content, reasoning, think_tags, "
        "reasoning_details, none",
        "defaults: {format: null}\n": "defaults.format cannot be null (leave it out to not set "
        "it); it must be one of: field, native",
        "routes: [{name: a, upstream: 'http://x/v1', reasoning: {strip_from_context: }}]\n": (
            "routes[0].reasoning.strip_from_context cannot be null (leave it out to not set it); "
            "it must be one of: all, allButLast, none"
        ),
    }
    for n, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"null{n}.yaml"
        routes = (
            "" if text.startswith("routes") else "routes: [{name: a, upstream: 'http://x/v1'}]\n"
        )
        path.write_text(text + routes)
        assert main(["check-config", str(path)]) == 2
        out = capsys.readouterr()
        assert out.err == f"reasoning-proxy: {path}: {message}\n"
        assert out.out == ""
    # null still unsets what has an unset state
    unset = tmp_path / "unset.yaml"
    unset.write_text("routes: [{name: a, upstream: 'http://x/v1'}]\nprofiles: {p: {effort: }}\n")
    assert main(["check-config", str(unset)]) == 0
    assert '"effort": null' in capsys.readouterr().out


def test_a_config_file_that_is_not_utf8_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b'routes: [{name: a, upstream: "http://x/v1"}]\n# caf\xe9 (latin-1)\n')
    said = (
        f"reasoning-proxy: {path}: not UTF-8: byte 0xe9 at line 2, column 6 "
        "(save the file as UTF-8)\n"
    )
    for command in (["check-config", str(path)], ["serve", "--config", str(path)]):
        assert main(command) == 2
        out = capsys.readouterr()
        assert out.err == said
        assert out.out == ""


def test_ttl_seconds_is_at_most_ten_years() -> None:
    """Past Redis's range every append failed halfway, leaving keys without a
    TTL; the bound is the same for every store."""
    for url in ("redis://127.0.0.1:6379/0", "sqlite:///h.db", "memory://"):
        with pytest.raises(ConfigError) as caught:
            build_config(config(store={"url": url, "ttl_seconds": 99999999999999999999999}), env={})
        assert str(caught.value).splitlines()[1:] == [
            "  store.ttl_seconds: must be at most 315360000 (ten years)"
        ]
    ten_years = build_config(config(store={"ttl_seconds": 315360000}), env={})
    assert ten_years.store.ttl_seconds == 315360000


@pytest.mark.parametrize("upstream", ["http://x y/v1", "http://x\ty/v1", "http://x/v 1"])
def test_an_upstream_with_a_space_is_refused(upstream: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config({"routes": [{"name": "r", "upstream": upstream}]}, env={})
    assert str(caught.value).splitlines()[1:] == [
        "  routes[0].upstream: must not contain spaces or control characters"
    ]


@pytest.mark.parametrize(
    "upstream",
    ["http://u:pa55word-very-secret@127.0.0.1:1/v1", "https://token@api.example.com/v1"],
)
def test_an_upstream_with_credentials_is_refused_without_echoing_them(upstream: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config({"routes": [{"name": "r", "upstream": upstream}]}, env={})
    assert str(caught.value).splitlines()[1:] == [
        "  routes[0].upstream: must not carry credentials (user:password@): a route's key "
        "goes in api_key or headers"
    ]
    assert "pa55word" not in str(caught.value)
    assert "token" not in str(caught.value)


@pytest.mark.parametrize(
    "upstream",
    [
        "http://a..b/v1",
        "http://bücher.example/v1",
        "http://%41pi.example/v1",
        "http://x<y/v1",
    ],
)
def test_an_upstream_host_that_cannot_be_a_host_is_refused(upstream: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config({"routes": [{"name": "r", "upstream": upstream}]}, env={})
    assert str(caught.value).splitlines()[1:] == [
        "  routes[0].upstream: must have a valid host: an IP address or a name of letters, "
        "digits, '-', '_' and '.' (an internationalized name in its xn-- form)"
    ]


@pytest.mark.parametrize(
    "upstream",
    [
        "http://127.0.0.1:8000/v1",
        "http://[::1]:8000/v1",
        "https://api.deepseek.com",
        "http://host.docker.internal:11434/v1",
        "http://my_service:8000/v1",  # a Compose service name
        "http://localhost./v1",
        "https://xn--bcher-kva.example/v1",
    ],
)
def test_upstream_hosts_that_resolve_are_taken(upstream: str) -> None:
    (route,) = build_config({"routes": [{"name": "r", "upstream": upstream}]}, env={}).routes
    assert route.upstream == upstream.rstrip("/")


def test_check_config_refuses_an_upstream_host_with_a_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "space.yaml"
    path.write_text('routes: [{name: a, upstream: "http://x y/v1"}]\n')
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"reasoning-proxy: {path}: invalid configuration\n"
        "  routes[0].upstream: must not contain spaces or control characters\n"
    )


def test_client_bounds_have_defaults() -> None:
    cfg = build_config(config(), env={})
    assert (cfg.server.request_header_timeout, cfg.server.request_body_timeout) == (30.0, 30.0)
    assert cfg.server.response_send_timeout == 60.0
    assert (cfg.limits.max_header_count, cfg.limits.max_head_bytes) == (100, 65536)


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("server", {"request_header_timeout": 0}, "server.request_header_timeout"),
        ("server", {"request_body_timeout": -1}, "server.request_body_timeout"),
        ("server", {"request_body_timeout": 7200}, "server.request_body_timeout"),
        ("server", {"response_send_timeout": 0}, "server.response_send_timeout"),
        ("limits", {"max_header_count": 5}, "limits.max_header_count"),
        ("limits", {"max_head_bytes": 512}, "limits.max_head_bytes"),
        # a head must hold the longest header value allowed
        (
            "limits",
            {"max_header_bytes": 16384, "max_head_bytes": 8192},
            "max_head_bytes must be at least max_header_bytes",
        ),
    ],
)
def test_client_bounds_are_validated(section: str, values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({**config(), section: values}, env={})
