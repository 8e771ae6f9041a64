"""The README's reference tables are checked against the code, so they
cannot drift: headers, config keys, reasoning settings, dialects, env vars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from proxy import config as config_module
from proxy.config import LimitsModel, RouteModel, ServerModel, StoreModel, UiModel
from proxy.dialects import DIALECTS
from proxy.settings import CONVERSATION_HEADER, DEFAULTS, PROFILE_HEADER, SETTINGS

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def table_after(heading: str) -> list[list[str]]:
    """The rows (cells without backticks) of the first table after a heading."""
    start = README.index(heading)
    rows: list[list[str]] = []
    for line in README[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def plain(cell: str) -> str:
    return cell.replace("`", "").strip()


def test_header_table_matches_the_settings() -> None:
    rows = {plain(r[0]): r for r in table_after("## Request headers")}
    expected = {s.header for s in SETTINGS} | {PROFILE_HEADER, CONVERSATION_HEADER}
    assert set(rows) == expected
    for setting in SETTINGS:
        values, default = rows[setting.header][1], plain(rows[setting.header][2])
        if setting.kind == "choice":
            assert re.findall(r"`([^`]+)`", values) == list(setting.choices)
        elif setting.kind == "bool":
            assert re.findall(r"`([^`]+)`", values) == ["true", "false"]
        elif setting.kind == "auto_bool":
            assert re.findall(r"`([^`]+)`", values) == ["auto", "true", "false"]
        current = getattr(DEFAULTS, setting.field)
        shown = "unset" if current is None else str(current).lower()
        assert default == shown, setting.header


@pytest.mark.parametrize(
    ("heading", "model"),
    [
        ("### `server`", ServerModel),
        ("### `store`", StoreModel),
        ("### `limits`", LimitsModel),
        ("### `ui`", UiModel),
        ("### `routes[]`", RouteModel),
    ],
)
def test_config_tables_list_every_key_with_its_default(
    heading: str, model: type[BaseModel]
) -> None:
    rows = {plain(r[0]): plain(r[1]) for r in table_after(heading)}
    assert set(rows) == set(model.model_fields)
    for name, info in model.model_fields.items():
        if info.is_required():
            assert rows[name] == "required"
        elif info.default is None:
            assert rows[name] == "unset"
        elif isinstance(info.default, bool):
            assert rows[name] == str(info.default).lower()
        elif isinstance(info.default, int | float | str):
            assert rows[name] == str(info.default)


def test_reasoning_settings_table_matches() -> None:
    rows = [
        [plain(c) for c in r] for r in table_after("### `defaults`, `profiles` and `reasoning`")
    ]
    assert rows == [[s.field, s.alias, s.header] for s in SETTINGS]


def test_dialect_table_matches() -> None:
    names = [plain(r[0]).split()[0] for r in table_after("then the route's dialect:")]
    assert names == list(DIALECTS)


def test_environment_table_lists_every_variable_the_code_reads() -> None:
    rows = {plain(r[0]) for r in table_after("### Environment")}
    variables = {v for k, v in vars(config_module).items() if k.startswith("ENV_")}
    assert variables <= rows


def test_the_development_tree_names_every_module() -> None:
    start = README.index("## Development")
    tree = README[start : README.index("```", README.index("```", start) + 3)]
    package = Path(config_module.__file__).parent
    names = {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
    names |= {p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()}
    missing = sorted(n for n in names if not re.search(rf"(?<![\w/]){re.escape(n)}", tree))
    assert missing == []


def test_the_routes_table_lists_every_dialect_name() -> None:
    row = next(r for r in table_after("### `routes[]`") if plain(r[0]) == "dialect")
    listed = re.findall(r"`([a-z]+)`", row[2].split("one of", 1)[1])
    assert ["auto", *listed] == list(config_module.DIALECT_NAMES)
