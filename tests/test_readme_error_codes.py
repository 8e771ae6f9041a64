"""The README's names that the code must also hold: every error `code` it
names with its status, and the demo's models."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.demo.wire import MODELS

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SOURCE = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "proxy").rglob("*.py"))


def test_every_error_code_named_with_a_status_is_one_the_code_sends() -> None:
    named = set(re.findall(r"\b[1-5]\d\d `([a-z]+(?:_[a-z]+)+)`", README))
    assert len(named) >= 20  # the pattern still finds the README's error codes
    missing = sorted(code for code in named if f'"{code}"' not in SOURCE)
    assert missing == []


def test_the_quick_start_names_every_demo_model() -> None:
    start = README.index("one model per dialect:")
    listed = re.findall(r"`(demo-[a-z]+)`", README[start : README.index(")", start)])
    assert listed == list(MODELS)
