"""The redacting log handler: messages, arguments, extra fields and
tracebacks lose every credential; JSON and text line formats."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from proxy.observability import (
    REDACTED,
    JsonFormatter,
    RedactingFilter,
    Redactor,
    TextFormatter,
    configure_logging,
    truncate,
)

SECRET = "configured-upstream-key-123"


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abc.def-ghi",
        "headers={'authorization': 'Bearer abc.def-ghi'}",
        '{"Authorization": "Basic dXNlcjpwYXNz"}',
        "api_key=abc.def-ghi",
        '{"api_key": "abc.def-ghi"}',
        "x-api-key: abc.def-ghi",
        "the key sk-proj-abcdefghijkl leaked",
        f"route key {SECRET} leaked",
    ],
)
def test_redactor_removes_credentials(text: str) -> None:
    out = Redactor([SECRET])(text)
    assert REDACTED in out
    for leaked in ("abc.def-ghi", "dXNlcjpwYXNz", "abcdefghijkl", SECRET):
        assert leaked not in out


def test_redactor_leaves_ordinary_text_alone() -> None:
    text = "route main status 200 tokens 123 task-list"
    assert Redactor([SECRET])(text) == text


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(Redactor([SECRET])))
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream, handler
    finally:
        logger.removeHandler(handler)


def test_every_part_of_a_record_is_redacted(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, _ = captured
    try:
        raise ValueError(f"upstream refused Bearer {SECRET} and sk-live-zyxwvutsrqpo")
    except ValueError:
        logger.exception(
            "calling %s with %s",
            "https://x",
            f"Authorization: Bearer {SECRET}",
            extra={"headers": {"authorization": "Bearer sk-extra-abcdefghij"}, "n": 3},
        )
    line = stream.getvalue()
    data = json.loads(line)
    assert SECRET not in line
    assert "sk-live-zyxwvutsrqpo" not in line
    assert "sk-extra-abcdefghij" not in line
    assert "Traceback" in data["exc"]
    assert "ValueError" in data["exc"]
    assert data["n"] == 3
    assert data["logger"] == "test.redaction"
    assert data["level"] == "error"


def test_text_format(captured: tuple[logging.Logger, io.StringIO, logging.Handler]) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    logger.info("chat.completions %s", 200, extra={"route": "main", "key": f"Bearer {SECRET}"})
    line = stream.getvalue()
    assert "INFO" in line
    assert "chat.completions 200" in line
    assert "route=main" in line
    assert SECRET not in line


def test_configure_logging_routes_uvicorn_through_the_redactor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("debug", "json", [SECRET])
        logging.getLogger("uvicorn.error").warning("client sent %s", SECRET)
        err = capsys.readouterr().err
        assert json.loads(err.strip().splitlines()[-1])["msg"] == f"client sent {REDACTED}"
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def test_truncate_cuts_long_strings_everywhere() -> None:
    body = {"messages": [{"content": "x" * 500}], "n": 1}
    cut = truncate(body, 10)
    assert cut["messages"][0]["content"] == "x" * 10 + "…(+490)"
    assert cut["n"] == 1
