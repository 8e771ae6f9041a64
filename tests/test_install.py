"""Installing: the package metadata, the console script's --version, and the
README's set-up line (a virtual environment, as Debian's Python requires)."""

from __future__ import annotations

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
