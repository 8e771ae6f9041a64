"""The build, with one option: REASONING_PROXY_COMPILE=1 compiles the hot path.

Everything else about the package is in pyproject.toml. With the variable
unset (the default, and always for editable installs) the wheel is pure
Python. With it set, the modules listed in pyproject.toml under
`[tool.reasoning-proxy.compile]` are compiled to C extensions by mypyc: the
same source, type-checked by mypy, run without the interpreter's per-bytecode
cost. The build then needs a C compiler and the Python headers; mypy and the
runtime dependencies (whose types mypyc reads) are asked for as build
requirements, so `REASONING_PROXY_COMPILE=1 pip install .` is the whole step.
"""

from __future__ import annotations

import os
import sys
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from setuptools import setup

HERE = Path(__file__).resolve().parent
ENV = "REASONING_PROXY_COMPILE"
# setuptools commands that write metadata only (no extension is built)
METADATA_ONLY = {"egg_info", "dist_info"}


def wanted() -> bool:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value not in ("1", "true", "yes"):
        raise SystemExit(f"{ENV} must be 1 or 0, not {value!r}")
    if "editable_wheel" in sys.argv:
        # extensions of an editable install would sit beside the sources and
        # shadow every later edit of them
        raise SystemExit(f"{ENV}=1 builds a wheel; it does not apply to editable installs")
    return True


def options() -> dict[str, Any]:
    if not wanted():
        return {}
    project = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))
    modules: list[str] = project["tool"]["reasoning-proxy"]["compile"]["modules"]
    extras = project["project"]["optional-dependencies"]
    # mypy reads the types of every module the compiled ones import; the
    # version is the one the dev extra pins (the one the tests compile with)
    mypy = next(r for r in extras["dev"] if r.startswith("mypy=="))
    requires = [mypy, "types-PyYAML", *project["project"]["dependencies"]]
    requires += extras["aiohttp"]
    if METADATA_ONLY & set(sys.argv):
        return {"setup_requires": requires}
    try:
        from mypyc.build import mypycify
    except ImportError:
        # the pass that asks for build requirements, before they are installed
        return {"setup_requires": requires}
    return {"setup_requires": requires, "ext_modules": mypycify(modules, opt_level="3")}


def drop_built_extensions() -> None:
    """setuptools packages everything an earlier build left in build/lib*:
    the extensions of a compiled build would land in a later pure wheel, or
    those of modules since dropped from the list in a compiled one. They go
    first, so a wheel holds exactly what this build compiles (the C sources
    and objects stay: an unchanged module is not compiled again)."""
    for lib in HERE.glob("build/lib*"):
        for path in lib.rglob("*"):
            if path.name.endswith(tuple(EXTENSION_SUFFIXES)):
                path.unlink()


drop_built_extensions()
setup(**options())
