"""Installing: the package metadata, the console script's --version, and the
README's set-up line (a virtual environment, as Debian's Python requires)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_license_is_an_spdx_expression() -> None:
    # the `license = {text = ...}` table is deprecated (PEP 639)
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    setuptools = next(r for r in PYPROJECT["build-system"]["requires"] if "setuptools" in r)
    assert setuptools == "setuptools>=77"  # the first release that reads SPDX strings


def test_version_of_the_console_script_and_the_module() -> None:
    expected = f"reasoning-proxy {PYPROJECT['project']['version']}"
    command = shutil.which("reasoning-proxy", path=str(Path(sys.executable).parent))
    assert command, "the console script is installed with the package"
    for argv in ([command, "--version"], [sys.executable, "-m", "proxy", "--version"]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected


def test_the_quick_start_installs_into_a_virtual_environment() -> None:
    start = README[README.index("## Quick start") : README.index("## Use it")]
    (block,) = re.findall(r"```sh\n(.*?)```", start, re.S)[:1]
    run = block.splitlines()[0]
    # a venv first, then everything from it: no pip into the system's Python
    assert run.startswith("python3 -m venv .venv && .venv/bin/pip install . ")
    assert ".venv/bin/reasoning-proxy demo" in run
    assert "python3-venv" in start
    assert "about" not in start.split("`scripts/test` creates")[1].split("CI")[0]


# -- the compiled build (setup.py; README "Compiled build") -------------------------


def setup_py(*argv: str, compile_: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REASONING_PROXY_COMPILE"}
    if compile_ is not None:
        env["REASONING_PROXY_COMPILE"] = compile_
    return subprocess.run(
        [sys.executable, "setup.py", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_compile_list_names_modules_of_the_package() -> None:
    modules = PYPROJECT["tool"]["reasoning-proxy"]["compile"]["modules"]
    assert modules == sorted(set(modules))
    for path in modules:
        assert path.startswith("proxy/"), path
        assert path.endswith(".py"), path
        assert (REPO / path).is_file(), path
    # what mypyc cannot compile, or what others subclass or introspect, stays out
    for kept_out in ("proxy/config.py", "proxy/observability.py", "proxy/api/door.py"):
        assert kept_out not in modules


def test_the_build_is_pure_python_unless_asked() -> None:
    for value in (None, "0", ""):
        result = setup_py("--name", compile_=value)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "reasoning-proxy"


def test_the_build_refuses_a_compile_setting_it_does_not_know() -> None:
    result = setup_py("--name", compile_="maybe")
    assert result.returncode != 0
    assert "REASONING_PROXY_COMPILE must be 1 or 0, not 'maybe'" in result.stderr


def test_an_editable_install_is_never_compiled() -> None:
    # its extensions would sit beside the sources and shadow every later edit
    result = setup_py("editable_wheel", compile_="1")
    assert result.returncode != 0
    assert "does not apply to editable installs" in result.stderr


def test_compiled_modules_avoid_what_mypyc_runs_differently() -> None:
    """Two shapes that pass mypy but behave differently compiled (each found
    by the suite against the compiled build): an `await` inside a `finally`
    loses the exception in flight, and one name bound by `except` clauses of
    different types is a TypeError when the second catches. And one that
    runs slowly compiled: `object.__setattr__` bound to a name."""
    found = []
    for path in PYPROJECT["tool"]["reasoning-proxy"]["compile"]["modules"]:
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and node.finalbody:
                awaits = [
                    sub.lineno
                    for stmt in node.finalbody
                    for sub in ast.walk(stmt)
                    if isinstance(sub, ast.Await | ast.AsyncWith | ast.AsyncFor)
                ]
                found += [f"{path}:{line}: await in a finally" for line in awaits]
            if isinstance(node, ast.Assign) and ast.unparse(node.value) == "object.__setattr__":
                # spelled out at each call it is a native store; a name for it is a call
                found.append(f"{path}:{node.lineno}: object.__setattr__ bound to a name")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                bound: dict[str, set[str]] = {}
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ExceptHandler) and sub.name and sub.type:
                        bound.setdefault(sub.name, set()).add(ast.unparse(sub.type))
                found += [
                    f"{path}: {node.name} binds {name!r} to {sorted(types)}"
                    for name, types in bound.items()
                    if len(types) > 1
                ]
    assert not found


def test_a_build_never_packages_extensions_an_earlier_build_left(tmp_path: Path) -> None:
    # setuptools packages whatever build/lib* holds: a compiled build's
    # extensions would reach a later pure wheel, or a dropped module's a
    # compiled one
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    lib = tmp_path / "build" / "lib.linux-x86_64-cpython-311"
    (lib / "proxy" / "http1").mkdir(parents=True)
    left = [
        lib / "proxy" / "http1" / "reader.cpython-311-x86_64-linux-gnu.so",
        lib / "0123456789abcdef__mypyc.cpython-311-x86_64-linux-gnu.so",
        lib / "proxy" / "dropped.abi3.so",
    ]
    for path in left:
        path.write_bytes(b"\x7fELF")
    (lib / "proxy" / "http1" / "reader.py").write_text("# a module: kept\n")
    result = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "REASONING_PROXY_COMPILE"},
    )
    assert result.returncode == 0, result.stderr
    assert [path for path in left if path.exists()] == []
    assert (lib / "proxy" / "http1" / "reader.py").exists()


def test_written_out_dataclass_inits_take_the_fields_with_their_defaults() -> None:
    """A dataclass of a compiled module may write its `__init__` out (then
    compiled, it is native: proxy/reasoning/blocks.py). Its parameters must
    be what the generated one's would be: the fields in order, each field's
    default (None for a default factory, which the body then calls)."""
    checked = []
    for path in PYPROJECT["tool"]["reasoning-proxy"]["compile"]["modules"]:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        for cls in vars(module).values():
            if not (
                isinstance(cls, type)
                and cls.__module__ == module.__name__
                and dataclasses.is_dataclass(cls)
                and not cls.__dataclass_params__.init  # type: ignore[attr-defined]
            ):
                continue
            params = list(inspect.signature(cls).parameters.values())
            assert [p.name for p in params] == [f.name for f in dataclasses.fields(cls)], cls
            for param, f in zip(params, dataclasses.fields(cls), strict=True):
                assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, (cls, f.name)
                if f.default is not dataclasses.MISSING:
                    assert param.default == f.default, (cls, f.name)
                elif f.default_factory is not dataclasses.MISSING:
                    assert param.default is None, (cls, f.name)
                    assert getattr(_made_with_defaults(cls), f.name) == f.default_factory()
                else:
                    assert param.default is inspect.Parameter.empty, (cls, f.name)
            checked.append(cls.__name__)
    assert {"Turn", "ThinkingBlock", "Exchange", "Head"} <= set(checked)


def _made_with_defaults(cls: type) -> object:
    """An instance with every required parameter None (enough to see what
    the defaults give: nothing here checks types)."""
    required = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.default is inspect.Parameter.empty
    ]
    return cls(**dict.fromkeys(required))


def test_the_build_compiles_with_the_mypy_the_dev_extra_pins() -> None:
    """scripts/test-compiled compiles with the dev environment's mypy, pip
    and the image with the one setup.py asks for: one pin serves both."""
    pins = [r for r in PYPROJECT["project"]["optional-dependencies"]["dev"] if r.startswith("mypy")]
    assert len(pins) == 1
    assert re.fullmatch(r"mypy==\d+\.\d+(\.\d+)?", pins[0]), pins
    # what setup.py asks for, read with setuptools' `setup` replaced (no build)
    probe = (
        "import json, runpy, sys, setuptools\n"
        "setuptools.setup = lambda **kw: print(json.dumps(kw.get('setup_requires')))\n"
        "sys.argv = ['setup.py', 'egg_info']\n"
        "runpy.run_path('setup.py', run_name='__main__')\n"
    )
    env = {**os.environ, "REASONING_PROXY_COMPILE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert pins[0] in json.loads(result.stdout)
