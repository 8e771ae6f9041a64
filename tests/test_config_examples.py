"""Every example in config/ passes the real `python -m proxy check-config`,
resolves to the dialects and settings its comments promise, and never prints
a secret; a broken file fails with exit 2 and a message naming the key."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "config").glob("*.yaml"))

# file -> {route name: dialect}, in route order
ROUTES = {
    "deepseek.yaml": {"deepseek": "deepseek"},
    "kimi.yaml": {"kimi": "kimi"},
    "openrouter.yaml": {"openrouter": "openrouter"},
    "vllm.yaml": {"vllm": "vllm", "sglang": "sglang"},
    "minimax.yaml": {"minimax": "minimax"},
    "groq.yaml": {"groq-gpt-oss": "groq", "groq-qwen3": "groq", "groq-other": "groq"},
    "ollama.yaml": {"ollama": "openai"},
    "multi-route.yaml": {
        "deepseek": "deepseek",
        "kimi": "kimi",
        "minimax": "minimax",
        "groq": "groq",
        "local-vllm": "vllm",
        "openrouter": "openrouter",
    },
}
# dialects that take reasoning back in their own shape, so the examples use native
NATIVE = {"openrouter", "vllm", "minimax"}
_REQUIRED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def dummy(name: str) -> str:
    return f"dummy-value-of-{name}"


def check_config(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(path)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        cwd=REPO,
        timeout=60,
        check=False,
    )


def required_vars(path: Path) -> set[str]:
    """The ${VAR} references without a default (comments excluded)."""
    lines = [line.split("#", 1)[0] for line in path.read_text().splitlines()]
    return set(_REQUIRED_VAR.findall("\n".join(lines)))


def test_every_example_is_covered() -> None:
    assert {p.name for p in EXAMPLES} == set(ROUTES)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_passes_check_config(path: Path) -> None:
    names = required_vars(path)
    result = check_config(path, {name: dummy(name) for name in names})
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith(f"{path}: OK")
    for name in names:
        assert dummy(name) not in result.stdout  # secrets print as <set>, never their value

    resolved: dict[str, Any] = json.loads(result.stdout)
    routes = resolved["routes"]
    assert {r["name"]: r["dialect"] for r in routes} == ROUTES[path.name]
    assert [r["name"] for r in routes] == list(ROUTES[path.name])
    for route in routes:
        if route["dialect"] in NATIVE:
            assert route["reasoning"].get("format") == "native", route["name"]
        assert route["api_key"] in ("<set>", "<forward the client's Authorization>")
        assert route["upstream"].startswith(("http://", "https://"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_explains_itself(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# "), "each example opens with a comment saying what it is for"
    assert "https://" in text  # cites the provider's documentation
    assert "reasoning-proxy serve --config config/" + path.name in text


def test_multi_route_profiles_and_server_settings() -> None:
    path = REPO / "config" / "multi-route.yaml"
    result = check_config(path, {n: dummy(n) for n in required_vars(path)})
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    assert set(resolved["profiles"]) == {"agent", "private", "quick", "deep"}
    assert resolved["profiles"]["agent"] == {
        "include_in_context": True,
        "strip_from_context": "allButLast",
    }
    assert resolved["server"]["require_auth"] is True
    assert resolved["server"]["secret"] == "<set>"
    assert resolved["server"]["admin_token"] == "<set>"
    # GET /v1/models (no model) goes to the first catch-all route
    assert [r["name"] for r in resolved["routes"] if "*" in r["models"]] == ["openrouter"]
    assert resolved["routes"][-1]["name"] == "openrouter"


def test_a_missing_environment_variable_is_named() -> None:
    path = REPO / "config" / "deepseek.yaml"
    result = check_config(path, {})
    assert result.returncode == 2
    assert "DEEPSEEK_API_KEY is not set" in result.stderr
    assert result.stdout == ""


def test_an_unknown_key_exits_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "routes:\n"
        "  - name: kimi\n"
        "    upstream: https://api.moonshot.ai/v1\n"
        "    dialekt: kimi\n"  # misspelt key
    )
    result = check_config(bad, {})
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"{bad}: invalid configuration" in result.stderr
    assert "routes[0].dialekt: unknown key" in result.stderr


def test_an_invalid_reasoning_value_names_the_allowed_ones(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "routes:\n"
        "  - name: vllm\n"
        "    upstream: http://127.0.0.1:8000/v1\n"
        "    dialect: vllm\n"
        "    reasoning:\n"
        "      format: inline\n"
    )
    result = check_config(bad, {})
    assert result.returncode == 2
    assert "routes[0].reasoning.format must be one of: field, native" in result.stderr
