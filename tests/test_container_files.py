"""Static checks of the container files (Dockerfile, docker-compose.yml,
.dockerignore, scripts/container-check). Cheap: nothing is built or run here;
scripts/container-check builds and runs them for real."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from proxy import config as config_module
from proxy.demo import run as demo_module

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
CHECK = REPO / "scripts" / "container-check"

ENV_NAME = re.compile(r"\bREASONING_PROXY_[A-Z0-9_]+\b")
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
CA_GUARD = "if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi"
DEV_PACKAGES = ("pytest", "hypothesis", "mypy", "ruff", "playwright", "httpx", "openai")


def known_env_vars() -> set[str]:
    """The REASONING_PROXY_* variables the code reads (its ENV_* constants),
    and the build's (setup.py's ENV)."""
    build = re.search(r'^ENV = "(\w+)"$', (REPO / "setup.py").read_text(), re.M)
    assert build is not None
    return {build[1]} | {
        value
        for module in (config_module, demo_module)
        for name, value in vars(module).items()
        if name.startswith("ENV_") and isinstance(value, str)
    }


# -- Dockerfile --------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined and
    comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


STEPS = instructions(DOCKERFILE)


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in STEPS:
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


FINAL = stages()[-1]


def test_dockerfile_takes_the_python_base_as_a_build_argument() -> None:
    first_from = next(i for i, (k, _) in enumerate(STEPS) if k == "FROM")
    args = [rest for keyword, rest in STEPS[:first_from] if keyword == "ARG"]
    assert any(re.fullmatch(r"BASE=python:3\.\d+-slim", a) for a in args), args
    froms = [rest for keyword, rest in STEPS if keyword == "FROM"]
    assert all(f.split()[0] == "${BASE}" for f in froms), froms


def test_dockerfile_is_multi_stage_wheel_then_install() -> None:
    assert len(stages()) >= 2
    build_runs = " ".join(rest for k, rest in stages()[0] if k == "RUN")
    assert "pip wheel" in build_runs
    final_runs = " ".join(rest for k, rest in FINAL if k == "RUN")
    assert "--no-index" in final_runs
    assert "from=build" in final_runs


def test_dockerfile_installs_no_dev_dependencies() -> None:
    runs = " ".join(rest for keyword, rest in STEPS if keyword == "RUN")
    assert "[dev]" not in runs
    for package in DEV_PACKAGES:
        assert not re.search(rf"\b{package}\b", runs), package
    assert requirements("") == PYPROJECT["project"]["dependencies"]
    refused = run_requirements("dev")
    assert refused.returncode != 0
    assert "EXTRAS: no extra 'dev' (the image takes ['aiohttp'])" in refused.stderr


def test_dockerfile_takes_the_aiohttp_extra_when_asked() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    wanted = PYPROJECT["project"]["dependencies"] + extras["aiohttp"]
    assert requirements("aiohttp") == wanted
    assert requirements(" aiohttp, ") == wanted
    unknown = run_requirements("aiohttp,redis")
    assert unknown.returncode != 0
    assert "no extra 'redis'" in unknown.stderr
    # both stages take the argument; the runtime installs the package with them
    for stage in stages():
        assert ("ARG", "EXTRAS") in stage
    final_runs = " ".join(rest for k, rest in FINAL if k == "RUN")
    assert '"reasoning-proxy${EXTRAS:+[$EXTRAS]}"' in final_runs


PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def run_requirements(extras: str) -> subprocess.CompletedProcess[str]:
    """The build stage's program that writes requirements.txt, run here as
    the Dockerfile runs it, with EXTRAS set."""
    (run,) = [rest for k, rest in stages()[0] if k == "RUN" and "> requirements.txt" in rest]
    program = re.search(r"python -c '([^']*)'", run)
    assert program is not None, run
    return subprocess.run(
        [sys.executable, "-c", program.group(1)],
        cwd=REPO,
        env={"EXTRAS": extras, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def requirements(extras: str) -> list[str]:
    result = run_requirements(extras)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_dockerfile_runs_as_a_non_root_user() -> None:
    users = [rest for keyword, rest in FINAL if keyword == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users


def test_dockerfile_healthcheck_uses_the_standard_library() -> None:
    checks = [rest for keyword, rest in FINAL if keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "/healthz" in checks[0]
    assert "urllib" in checks[0]
    assert not re.search(r"\b(curl|wget)\b", checks[0])
    assert ("EXPOSE", "8787") in FINAL


def test_dockerfile_serves_on_every_interface_from_the_environment() -> None:
    cmd = json.loads([rest for keyword, rest in FINAL if keyword == "CMD"][-1])  # exec form
    assert cmd[:2] == ["reasoning-proxy", "serve"], cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--port") + 1] == "8787"
    assert "--config" not in cmd  # the config comes from the environment
    assert "--upstream" not in cmd
    assert ("COPY", "config/ /etc/reasoning-proxy/") in FINAL


def test_dockerfile_network_steps_accept_the_optional_ca_bundle_secret() -> None:
    for keyword, rest in STEPS:
        if keyword == "RUN" and "pip " in rest and "--no-index" not in rest:
            assert rest.startswith("--mount=type=secret,id=cacert"), rest
            assert CA_GUARD in rest, rest


def test_dockerfile_documents_only_variables_the_code_reads() -> None:
    assert set(ENV_NAME.findall(DOCKERFILE)) <= known_env_vars()


def test_dockerignore_keeps_what_the_build_copies() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the context is an allow-list"
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for keyword, rest in STEPS:
        if keyword == "COPY" and "--from" not in rest:
            copied.update(p.rstrip("/").removeprefix("./") for p in rest.split()[:-1])
    assert copied <= kept, copied - kept


# -- docker-compose.yml -------------------------------------------------------------


def environment(service: str) -> dict[str, Any]:
    env = SERVICES[service].get("environment") or {}
    assert isinstance(env, dict), f"{service}: environment as a mapping"
    return env


def test_compose_has_the_proxy_redis_and_demo_services() -> None:
    assert {"proxy", "redis", "demo"} <= set(SERVICES)
    assert "profiles" not in SERVICES["proxy"]
    assert "profiles" not in SERVICES["redis"]
    assert SERVICES["demo"]["profiles"] == ["demo"]


def test_compose_proxy_service() -> None:
    proxy = SERVICES["proxy"]
    assert proxy["build"]["context"] == "."
    assert proxy["build"]["args"]["BASE"] == "${PYTHON_BASE:-python:3.12-slim}"
    assert any(str(p).endswith(":8787") for p in proxy["ports"])
    env = environment("proxy")
    assert env["REASONING_PROXY_STORE"] == "redis://redis:6379/0"
    # passed on from the shell, and required by the service's command
    assert "REASONING_PROXY_SECRET" in env
    assert env["REASONING_PROXY_SECRET"] is None
    script = proxy["command"][-1]
    assert proxy["command"][:2] == ["sh", "-c"]
    assert script.startswith('if [ -z "$$REASONING_PROXY_SECRET" ]; then')
    assert "exit 2" in script
    assert script.endswith("exec reasoning-proxy serve --host 0.0.0.0 --port 8787")
    assert "redis" in proxy["depends_on"]


def test_compose_requires_no_variable_by_interpolation() -> None:
    # Compose interpolates every service, also those not started: a
    # ${VAR:?...} for the proxy would stop the demo too
    code = "\n".join(line.split("#", 1)[0] for line in COMPOSE_TEXT.splitlines())
    required = [m.group(0) for m in INTERPOLATION.finditer(code) if m.group(2) in (":?", "?")]
    assert not required


def test_compose_publishes_ports_on_localhost_by_default() -> None:
    ports = [str(p) for service in SERVICES.values() for p in service.get("ports", [])]
    assert len(ports) == 2
    for port in ports:
        assert port.startswith("${PUBLISH_ADDRESS:-127.0.0.1}:"), port


def test_compose_redis_is_an_official_image_by_default() -> None:
    image = SERVICES["redis"]["image"]
    match = INTERPOLATION.fullmatch(image)
    default = match.group(3) if match else image
    assert re.fullmatch(r"redis:[\w.-]+", default), image


def test_compose_demo_service_needs_no_secret_and_no_redis() -> None:
    demo = SERVICES["demo"]
    command = demo["command"]
    assert command[:2] == ["reasoning-proxy", "demo"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert demo["image"] == SERVICES["proxy"]["image"]
    assert demo["build"] == SERVICES["proxy"]["build"]
    env = environment("demo")
    assert "REASONING_PROXY_SECRET" not in env
    assert "REASONING_PROXY_STORE" not in env  # its history lives in memory
    assert "depends_on" not in demo


def test_compose_uses_only_variables_the_code_reads() -> None:
    used = set(ENV_NAME.findall(COMPOSE_TEXT))
    assert used, "no REASONING_PROXY_* variable at all"
    assert used <= known_env_vars(), used - known_env_vars()


def test_compose_documents_every_variable_in_comments() -> None:
    comments = "\n".join(
        line.split("#", 1)[1] for line in COMPOSE_TEXT.splitlines() if line.lstrip().startswith("#")
    )
    names = {name for service in SERVICES for name in environment(service)}
    names |= {m.group(1) for m in INTERPOLATION.finditer(COMPOSE_TEXT.split("services:", 1)[1])}
    missing = {name for name in names if not re.search(rf"\b{name}\b", comments)}
    assert not missing, missing


def test_compose_interpolations_have_non_empty_defaults() -> None:
    # podman-compose 1.0.x leaves `${VAR:-}` (an empty default) unexpanded.
    for match in INTERPOLATION.finditer(COMPOSE_TEXT):
        if match.group(2) is not None:
            assert match.group(3), match.group(0)


# -- scripts/container-check --------------------------------------------------------


def test_container_check_is_strict_bash() -> None:
    text = CHECK.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert CHECK.stat().st_mode & 0o111


# the project's bash scripts (scripts/test installs shellcheck, as CI does)
BASH_SCRIPTS = [CHECK, REPO / ".ci/run", REPO / "scripts/test", REPO / "scripts/test-compiled"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", BASH_SCRIPTS, ids=lambda p: p.name)
def test_the_bash_scripts_are_shellcheck_clean(script: Path) -> None:
    assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")
    result = subprocess.run(
        ["shellcheck", str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def smoke_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "container_smoke", CHECK.parent / "container_smoke.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_container_smoke_rejects_a_tag_in_the_answer() -> None:
    smoke = smoke_module()
    smoke.check_answer("ok", "17 times 23", "17 * 23 = 391.")
    with pytest.raises(smoke.CheckFailed, match="reasoning tag"):
        smoke.check_answer("leak", "17 times 23", "<think>x</think>17 * 23 = 391.")
    with pytest.raises(smoke.CheckFailed, match="no reasoning"):
        smoke.check_answer("none", " ", "17 * 23 = 391.")


def run_probe(code: str) -> str:
    """What one of container_smoke's in-image probes prints, run here against
    the package under test."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    ).stdout


def test_container_smoke_compares_the_installed_modules_with_the_tree() -> None:
    smoke = smoke_module()
    # Run here, against the package under test, the image's side gives the tree.
    digests = run_probe(smoke.IMAGE_DIGESTS)
    smoke.sources(str(REPO), digests)
    changed = json.loads(digests)
    changed["proxy/cli.py"] = "0" * 64
    with pytest.raises(smoke.CheckFailed, match="not built from this tree"):
        smoke.sources(str(REPO), json.dumps(changed))


def test_container_smoke_compares_the_compiled_modules_with_the_compile_list() -> None:
    smoke = smoke_module()
    # Run here, against the package under test: pure Python (scripts/test), or
    # the compiled build (scripts/test-compiled).
    found = run_probe(smoke.IMAGE_COMPILED)
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["reasoning-proxy"]
    names = sorted(p.removesuffix(".py").replace("/", ".") for p in listed["compile"]["modules"])
    assert json.loads(found) in ([], names)
    built, other = ("1", "0") if json.loads(found) else ("0", "1")
    smoke.compiled(str(REPO), built, found)
    with pytest.raises(smoke.CheckFailed, match=f"not the ones COMPILE={other} builds"):
        smoke.compiled(str(REPO), other, found)
    with pytest.raises(smoke.CheckFailed, match="not the ones COMPILE=1 builds"):
        smoke.compiled(str(REPO), "1", json.dumps(names[1:]))
