"""The redacting log handler: messages, arguments, extra fields and
tracebacks lose every credential; JSON and text line formats."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.observability import (
    _PATTERNS,
    FIELD_LIMIT,
    REDACTED,
    JsonFormatter,
    RedactingFilter,
    Redactor,
    TextFormatter,
    configure_logging,
    log_fields,
    sensitive_name,
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
        # a credential's name written as text, quoted or not, any spelling
        '{"password": "abc.def-ghi"}',
        "{'apiKey': 'abc.def-ghi'}",
        '{"x-goog-api-key":"abc.def-ghi"}',
        "token=abc.def-ghi&next=1",
        "POST /oauth client_secret=abc.def-ghi; refresh_token: abc.def-ghi",
        '{"key": "abc.def-ghi"}',
        '{"access_token": "abc.def-ghi with spaces"}',
        '{"token": "abc.def-ghi',  # a body cut by truncate() inside the value
        # keys known by their prefix
        "groq gsk_abcdefghijkl0123456789abcdefghijkl",
        "xai xai-abcdefghijkl0123456789abcdefghijkl",
        "google AIzaSyabcdefghijkl0123456789abcdefghi",
        "hugging face hf_abcdefghijkl0123456789ABCDEF",
        "anthropic sk-ant-api03-abcdefghijkl",
    ],
)
def test_redactor_removes_credentials(text: str) -> None:
    out = Redactor([SECRET])(text)
    assert REDACTED in out
    for leaked in ("abc.def-ghi", "dXNlcjpwYXNz", "abcdefghijkl", SECRET):
        assert leaked not in out


@pytest.mark.parametrize(
    "text",
    [
        "route main status 200 tokens 123 task-list",
        '{"max_tokens": 100, "prompt_tokens": 5, "completion_tokens_details": {}}',
        "monkey: 4, hotkey=f5, keyboard: us, prompt_cache_key: c1",
        "sk-learn hf_hub hf_transfer xai-grok gsk_short AIzaShort risk-free",
    ],
)
def test_redactor_leaves_ordinary_text_alone(text: str) -> None:
    assert Redactor([SECRET])(text) == text


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("X-API-KEY", True),
        ("x-goog-api-key", True),
        ("key", True),
        ("Token", True),
        ("access_token", True),
        ("refreshToken", True),
        ("client_secret", True),
        ("password", True),
        ("Proxy-Authorization", True),
        ("aws_secret_access_key", True),
        ("max_tokens", False),
        ("prompt_tokens", False),
        ("prompt_cache_key", False),
        ("keys", False),
        ("monkey", False),
        (b"authorization", True),
        ("model", False),
        (3, False),
    ],
)
def test_sensitive_names(name: object, sensitive: bool) -> None:
    assert sensitive_name(name) is sensitive


def test_structured_values_keep_their_shape() -> None:
    body = {
        "api_key": "plainkey-1234567890",
        "token": {"value": "tok-abcdef", "expires": 3600, "rotating": True, "scope": None},
        "secrets": ["not-a-credential-name"],
        "max_tokens": 100,
    }
    assert Redactor().value(body) == {
        "api_key": REDACTED,
        "token": {"value": REDACTED, "expires": REDACTED, "rotating": True, "scope": None},
        "secrets": ["not-a-credential-name"],
        "max_tokens": 100,
    }


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


@pytest.mark.usefixtures("root_logging")
def test_configure_logging_routes_uvicorn_through_the_redactor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("debug", "json", [SECRET])
    logging.getLogger("uvicorn.error").warning("client sent %s", SECRET)
    err = capsys.readouterr().err
    line = json.loads(err.strip().splitlines()[-1])
    assert line["msg"] == f"client sent {REDACTED}"
    # the fields a line shows are still collected, the others no longer
    assert (line["pid"], line["logger"], line["level"]) == (os.getpid(), "uvicorn.error", "warning")
    record = logging.getLogger("x").makeRecord("x", logging.INFO, "f", 1, "m", (), None)
    assert (record.process, record.threadName, record.processName) == (os.getpid(), None, None)


# one value per place a body can hide a credential; none is a configured
# secret, and none has a known prefix: only the field names give them away
NESTED_SECRETS = {
    "top": "plainkey-1234567890",
    "camel": "camel-0987654321",
    "nested": "tok-abcdef123456",
    "in_list": "listed-pass-5555",
    "deep": "deep-secret-7777",
    "header": "hdr-key-3333",
    "pair": "pair-key-2222",
    "number": "424242424242",
    "text": "text-token-9999",
}


def nested_body() -> dict[str, Any]:
    s = NESTED_SECRETS
    return {
        "model": "m",
        "api_key": s["top"],
        "apiKey": s["camel"],
        "max_tokens": 100,
        "metadata": {"token": s["nested"], "user": "u1"},
        "messages": [
            {"role": "user", "content": f'log line: {{"password": "{s["text"]}"}}'},
            {"role": "user", "content": "hi", "credentials": [{"password": s["in_list"]}]},
        ],
        "extra": {"a": [{"b": {"client_secret": s["deep"]}}]},
        "headers": [["X-Api-Key", s["pair"]], {"x-goog-api-key": s["header"]}, ["model", "m"]],
        "pin": {"access_token": int(s["number"])},
    }


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.usefixtures("root_logging")
def test_a_logged_body_loses_credentials_at_any_depth(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    configure_logging("info", fmt, [SECRET])
    logging.getLogger("proxy.chat").info("request", extra={"body": truncate(nested_body())})
    logging.getLogger("proxy.chat").info("request", extra={"token": NESTED_SECRETS["top"]})
    err = capsys.readouterr().err
    assert err.count("request") == 2
    for value in NESTED_SECRETS.values():
        assert value not in err
    if fmt == "json":
        body = json.loads(err.splitlines()[0])["body"]
        assert body["api_key"] == REDACTED
        assert body["metadata"] == {"token": REDACTED, "user": "u1"}
        assert body["messages"][1]["credentials"] == [{"password": REDACTED}]
        assert body["extra"] == {"a": [{"b": {"client_secret": REDACTED}}]}
        assert body["pin"] == {"access_token": REDACTED}
        assert body["max_tokens"] == 100
        assert body["headers"] == [
            ["X-Api-Key", REDACTED],
            {"x-goog-api-key": REDACTED},
            ["model", "m"],
        ]
        assert json.loads(err.splitlines()[1])["token"] == REDACTED


def _access_fields() -> dict[str, Any]:
    return {
        "method": "POST",
        "status": 200,
        "duration_ms": 1.25,
        "route": "main",
        "api_key": NESTED_SECRETS["top"],
        "note": f"sent Bearer {SECRET}",
        "headers": [["X-Api-Key", NESTED_SECRETS["pair"]]],
        "body": truncate(nested_body()),
        "done": True,
        "gone": None,
    }


def _without_time(line: str, fmt: str) -> str:
    if fmt == "json":
        data = json.loads(line)
        assert data.pop("ts")
        return json.dumps(data)
    return line.split(" ", 2)[2]  # after the date and the time


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.usefixtures("root_logging")
def test_a_line_written_directly_is_the_records_line(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    configure_logging("info", fmt, [SECRET])
    logger = logging.getLogger("proxy.request")
    log_fields(logger, logging.INFO, "POST /v1/chat 200", _access_fields())
    # a filter on the logger puts a record in the way: the stdlib's path
    logger.addFilter(lambda record: True)
    try:
        log_fields(logger, logging.INFO, "POST /v1/chat 200", _access_fields())
    finally:
        logger.filters.clear()
    direct, recorded = capsys.readouterr().err.splitlines()
    assert _without_time(direct, fmt) == _without_time(recorded, fmt)
    for value in (SECRET, *NESTED_SECRETS.values()):
        assert value not in direct
    if fmt == "json":
        data = json.loads(direct)
        assert (data["logger"], data["level"]) == ("proxy.request", "info")
        assert data["pid"] == os.getpid()
        assert (data["api_key"], data["status"], data["done"], data["gone"]) == (
            REDACTED,
            200,
            True,
            None,
        )


@pytest.mark.usefixtures("root_logging")
def test_a_direct_line_yields_to_any_other_handler_and_to_the_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("warning", "json", [SECRET])
    logger = logging.getLogger("proxy.request")
    log_fields(logger, logging.INFO, "below the level", {"n": 1})
    assert capsys.readouterr().err == ""
    logging.getLogger().setLevel(logging.INFO)
    other = io.StringIO()
    extra = logging.StreamHandler(other)
    logging.getLogger().addHandler(extra)  # as a test's log capture adds one
    log_fields(logger, logging.INFO, "to both", {"token": SECRET})
    err = capsys.readouterr().err
    assert json.loads(err)["token"] == REDACTED
    assert "to both" in other.getvalue()


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("the log's stream is gone")


@pytest.mark.usefixtures("root_logging")
def test_a_direct_line_that_cannot_be_written_is_reported_not_raised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "json", [SECRET])
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(_Broken())
    log_fields(logging.getLogger("proxy.request"), logging.INFO, "POST /x 200", {"n": 1})
    # as for a record: logging's own report on stderr, and the request goes on
    assert "Logging error" in capsys.readouterr().err


def test_truncate_cuts_long_strings_everywhere() -> None:
    body = {"messages": [{"content": "x" * 500}], "n": 1}
    cut = truncate(body, 10)
    assert cut["messages"][0]["content"] == "x" * 10 + "…(+490)"
    assert cut["n"] == 1


# Pieces that the redaction patterns react to, and ordinary ones around them:
# names, separators and values, often in that order.
_NAMES = st.sampled_from(
    [
        "Bearer", "bearer", "Authorization", "authorization", "Basic",
        "api_key", "apiKey", "x-api-key", "token", "TOKEN", "secret", "Passwd", "password",
        "cookie", "Cookie", "key", "monkey", "secret_key", "client-secret", "x",
    ]
)  # fmt: skip
_SEPARATORS = st.sampled_from([" ", "\t", "=", ": ", '": "', "':'", '"=', ""])
_VALUES = st.sampled_from(
    [
        "abc", "0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJ", "é", "/v1/chat",
        "sk-", "sk-ant-", "gsk_", "xai-", "AIza", "hf_", "pplx-", "r8_", "ghp_",
        "github_pat_", "sk_live_", "rk_test_", "xoxb-", "xoxp-",
        '"', "'", ",", "&", ";", "}", "]", "\n", "\\", "-", "_",
    ]
)  # fmt: skip
_FILLERS = st.sampled_from(["", " ", ", ", "&", ";", "\n", "}", "x"]) | st.text(max_size=3)
_PIECES = st.tuples(_NAMES, _SEPARATORS, _VALUES, _VALUES, _FILLERS).map("".join)


def _redact_in_full(text: str) -> str:
    """The substitutions without the screen, as the redactor ran before it."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@given(st.lists(_PIECES, min_size=1, max_size=5).map("".join))
@settings(max_examples=600)
def test_the_screen_only_skips_texts_the_patterns_leave_alone(text: str) -> None:
    """The one search that lets most log fields through untouched never
    lets through a text that a pattern would change."""
    redact = Redactor()
    expected = _redact_in_full(text)
    assert redact(text) == expected
    assert redact(text) == expected  # again: from the memo of clean texts, or redacted again


def test_only_texts_that_need_nothing_are_remembered() -> None:
    redact = Redactor([SECRET])
    clean, dirty = "route main model m", f"key {SECRET} and Bearer abc.def"
    for _ in range(2):
        assert redact(clean) == clean
        assert redact(dirty) == f"key {REDACTED} and Bearer {REDACTED}"
    assert clean in redact._clean
    assert dirty not in redact._clean  # no credential is held longer than its line


def test_line_times_follow_each_record_across_seconds() -> None:
    """The second is formatted once per second and reused: each record still
    carries its own time, in UTC for JSON and local time for text."""
    json_format, text_format = JsonFormatter(), TextFormatter()
    times = [1_700_000_000.25, 1_700_000_000.999, 1_700_000_001.5, 1_699_999_999.0]
    for created in times:
        record = logging.makeLogRecord(
            {"msg": "m", "created": created, "msecs": created % 1 * 1000}
        )
        stamp = json.loads(json_format.format(record))["ts"]
        whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        assert stamp == f"{whole}.{int(created % 1 * 1000):03d}Z"
        local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))
        assert text_format.format(record).startswith(f"{local} ")


def test_json_lines_are_compact_objects_and_take_what_orjson_refuses() -> None:
    fields = {"msg": "m", "levelname": "INFO", "name": "proxy.request"}
    record = logging.makeLogRecord({**fields, "count": 2**70, "text": "a\ud800b"})
    line = JsonFormatter().format(record)  # the stdlib's encoder, for both
    data = json.loads(line)
    assert (data["count"], data["text"], data["msg"]) == (2**70, "a\ud800b", "m")
    record = logging.makeLogRecord({**fields, "status": 200, "model": "é", "ok": None})
    line = JsonFormatter().format(record)
    assert '"status":200,"model":"é","ok":null}' in line  # one line, UTF-8 as is
    assert "\n" not in line


def test_the_proxys_own_warnings_pass_the_redactor_whole() -> None:
    """The redactor took "tenant secret: until it does" for a named value and
    logged "tenant secret: [REDACTED] it does";
    the warnings about the tenant secret are worded so that no credential's
    name is followed by a colon, and read whole."""
    from proxy.runtime import (
        KEPT_SECRET_NOTE,
        RANDOM_SECRET_WARNING,
        SEALED_SECRET_WARNING,
        SECRET_AGREES_NOTE,
        SECRET_CONFLICT_ERROR,
    )

    redact = Redactor([SECRET])
    for text in (
        RANDOM_SECRET_WARNING,
        SEALED_SECRET_WARNING,
        KEPT_SECRET_NOTE % "redis",
        SECRET_CONFLICT_ERROR % "redis",
        SECRET_AGREES_NOTE % "sqlite",
    ):
        assert redact(text) == text
    # a value after the same words and a colon is still taken for a secret
    assert redact("tenant secret: abc.def-ghi") == f"tenant secret: {REDACTED}"


# what a client chooses: a model name, a path (scope["path"] is percent-decoded)
FORGED = "m\n2030-01-01 00:00:00 INFO    [1] proxy.request: GET /forged 200"
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\u202eevil\u2028\x85\x7f"


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.usefixtures("root_logging")
def test_text_lines_escape_control_characters_a_client_wrote(
    capsys: pytest.CaptureFixture[str], direct: bool
) -> None:
    """With --log-format text, a model name with a line break wrote a forged
    second line, and ESC reached the terminal."""
    configure_logging("info", "text", [SECRET])
    logger = logging.getLogger("proxy.request")
    if not direct:  # a filter on the logger puts a record in the way
        logger.addFilter(lambda record: True)
    try:
        fields = {"path": "/v1/a\nb", "model": FORGED, "conversation": ESCAPES, "n": 3}
        log_fields(logger, logging.INFO, "POST /v1/a\nb\\n 200", fields)
    finally:
        logger.filters.clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line, ended once
    for char in "\x1b\x07\x7f\x85\u202e\u2028\r":
        assert char not in err
    assert ": POST /v1/a\\nb\\\\n 200 " in err  # the backslash doubled: \n is always escaped
    assert "path=/v1/a\\nb " in err
    assert 'model="m\\n2030-01-01 00:00:00 INFO    [1] proxy.request: GET /forged 200"' in err
    assert "conversation=\\x1b[2J\\x1b]0;pwned\\x07\\u202eevil\\u2028\\x85\\x7f n=3" in err


@pytest.mark.usefixtures("root_logging")
def test_a_text_value_that_reads_as_several_fields_is_quoted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "text")
    fields = {"model": 'x status=500 note="a"', "route": "main", "empty": ""}
    log_fields(logging.getLogger("proxy.request"), logging.INFO, "POST /v1/x 200", fields)
    err = capsys.readouterr().err
    assert err.endswith(' model="x status=500 note=\\"a\\"" route=main empty=""\n')


def test_a_traceback_keeps_its_lines_and_loses_other_control_characters() -> None:
    try:
        raise ValueError("bad \x1b[31mmodel\r")
    except ValueError:
        record = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, "f", 1, "m", (), sys.exc_info()
        )
    RedactingFilter(Redactor()).filter(record)
    line = TextFormatter().format(record)
    assert "\nTraceback (most recent call last):\n" in line
    assert "ValueError: bad \\x1b[31mmodel\\r" in line
    assert "\x1b" not in line
    assert "\r" not in line


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.usefixtures("root_logging")
def test_long_values_a_client_wrote_are_cut_in_both_formats(
    capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """A 300 KB model name was written whole into every line of its request."""
    configure_logging("info", fmt, [SECRET])
    model = "é" * 300_000
    key = f"sk-{'a' * 30}"
    fields = {"model": model, "note": "x" * 189 + " " + key, "route": "main"}
    log_fields(logging.getLogger("proxy.request"), logging.INFO, "POST /v1/x 200", fields)
    err = capsys.readouterr().err
    assert len(err) < 1000
    assert "é" * FIELD_LIMIT + f"…(+{300_000 - FIELD_LIMIT})" in err
    # redacted before it is cut: no key is left too short to be known
    assert "x" * 189 + " sk-[REDACT…(+3)" in err
    assert "sk-aaa" not in err
    if fmt == "json":
        data = json.loads(err)
        assert data["model"] == "é" * FIELD_LIMIT + f"…(+{300_000 - FIELD_LIMIT})"
        assert data["route"] == "main"
