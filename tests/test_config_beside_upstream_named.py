"""A config file and an upstream URL are refused together, and the refusal
names where each came from: a variable exported long ago (in a shell
profile, a container image) beside a flag read as if nothing else had been
given (`give a config file or an upstream URL, not both` to a command with
one `--upstream`). `check-config FILE` refuses what `serve --config FILE`
refuses: it said OK to a file that `serve` then would not start with."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import ENV_CONFIG, ENV_UPSTREAM
from tests.harness import free_port
from tests.test_startup import UPSTREAM, assert_refused, run


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(f"routes:\n  - name: main\n    upstream: {UPSTREAM}\n")
    return path


def test_an_upstream_variable_beside_a_config_file_is_named(config: Path) -> None:
    port = str(free_port())
    extra = {ENV_UPSTREAM: UPSTREAM}
    served = run("serve", "--config", str(config), "--port", port, extra_env=extra)
    line = assert_refused(served, f"--config and {ENV_UPSTREAM}", f"unset {ENV_UPSTREAM}")
    checked = run("check-config", str(config), extra_env=extra)
    assert assert_refused(checked) == line.replace("--config", str(config))


def test_a_config_variable_beside_an_upstream_flag_is_named(config: Path) -> None:
    port = str(free_port())
    extra = {ENV_CONFIG: str(config)}
    served = run("serve", "--upstream", UPSTREAM, "--port", port, extra_env=extra)
    assert_refused(served, f"{ENV_CONFIG} and --upstream", f"unset {ENV_CONFIG}")


def test_both_variables_or_both_flags(config: Path) -> None:
    port = str(free_port())
    both = {ENV_CONFIG: str(config), ENV_UPSTREAM: UPSTREAM}
    assert_refused(run("serve", "--port", port, extra_env=both), f"{ENV_CONFIG} and {ENV_UPSTREAM}")
    assert_refused(run("check-config", extra_env=both), f"{ENV_CONFIG} and {ENV_UPSTREAM}")
    flags = run("serve", "--config", str(config), "--upstream", UPSTREAM, "--port", port)
    assert_refused(flags, "--config and --upstream", "give only one")
    # the file alone is fine
    assert run("check-config", str(config)).returncode == 0
