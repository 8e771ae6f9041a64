"""Metrics (Prometheus) and logs (one line per request, redacted).

`Metrics` owns the counters in a registry of its own (several apps in one
process do not collide). With several workers, prometheus-client's
multi-process mode is used: the CLI points PROMETHEUS_MULTIPROC_DIR at a
fresh directory before the workers start, and /metrics aggregates the files.

`configure_logging` installs one handler on the root logger (uvicorn's
loggers propagate to it) with a redacting filter (`Redactor`): every
configured secret, Authorization values, fields with a credential's name
(`api_key`, `token`, `password`, ... at any depth of an extra field such as
a logged body, or written as text), and keys with a known prefix (`sk-...`,
`gsk_...`) are replaced in the message, its arguments, extra fields and
tracebacks. What a client wrote into a line is kept harmless: string fields
are cut to FIELD_LIMIT characters (both formats), and the text format
escapes control characters and quotes values that would read as fields.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import orjson
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder

from proxy import package_version
from proxy.keymask import encoded_forms
from proxy.memo import Recent
from proxy.tally import Tally

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REDACTED = "[REDACTED]"


# seconds: a whole request (streams run for minutes), and an upstream's first byte
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
TTFB_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every metric of one proxy process. Help texts are the README's
    (tests/e2e/test_metrics.py compares them)."""

    def __init__(self) -> None:
        # one *_total per counter, no *_created sample beside it (process-wide)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        if not self.multiprocess:
            # with --workers, each process has its own: see render()
            ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        # one process: plain numbers, read when scraped (proxy.tally); with
        # --workers, prometheus-client's metrics and their shared files
        self._tally = None if self.multiprocess else Tally()
        if self._tally is not None:
            r.register(self._tally)
        self.build_info = self._gauge(
            "reasoning_proxy_build_info",
            "Always 1; the labels name the running version and Python.",
            ["version", "python"],
            multiprocess_mode="max",
        )
        self.build_info.labels(package_version(), platform.python_version()).set(1)
        self.requests = self._counter(
            "reasoning_proxy_requests",
            "Requests answered, by route, endpoint and status.",
            ["route", "endpoint", "status"],
        )
        self.request_duration = self._histogram(
            "reasoning_proxy_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response, by route and endpoint.",
            ["route", "endpoint"],
            buckets=DURATION_BUCKETS,
        )
        self.upstream_ttfb = self._histogram(
            "reasoning_proxy_upstream_ttfb_seconds",
            "Seconds from sending a request upstream to the upstream's first response byte, "
            "by route and endpoint.",
            ["route", "endpoint"],
            buckets=TTFB_BUCKETS,
        )
        self.in_flight = self._gauge(
            "reasoning_proxy_requests_in_flight",
            "Requests being answered now, by endpoint.",
            ["endpoint"],
            multiprocess_mode="livesum",
        )
        self.streams = self._counter(
            "reasoning_proxy_streams",
            "Streamed responses, by route and how they ended.",
            ["route", "outcome"],
        )
        self.reasoning_blocks = self._counter(
            "reasoning_proxy_reasoning_blocks",
            "Reasoning blocks extracted, by source field.",
            ["source"],
        )
        self.delimiters = self._counter(
            "reasoning_proxy_delimiters_stripped",
            "Reasoning tag delimiters removed from answers.",
        )
        self.reinjected = self._counter(
            "reasoning_proxy_turns_reinjected",
            "Assistant messages sent upstream with reasoning from the store, by dialect.",
            ["dialect"],
        )
        self.stripped = self._counter(
            "reasoning_proxy_turns_stripped",
            "Assistant messages whose known reasoning was not sent upstream, by dialect.",
            ["dialect"],
        )
        self.compressions = self._counter(
            "reasoning_proxy_compressions",
            "Requests whose strip policy was tightened to fit the context, by policy.",
            ["policy"],
        )
        self.store_ops = self._counter(
            "reasoning_proxy_store_operations",
            "Store calls, by operation and result (ok or error).",
            ["op", "result"],
        )
        # (multiprocess_mode only matters when several workers write files)
        self.store_conversations = self._gauge(
            "reasoning_proxy_store_conversations",
            "Conversations in the store.",
            multiprocess_mode="max",
        )
        self.store_bytes = self._gauge(
            "reasoning_proxy_store_bytes",
            "Bytes the store reports holding.",
            multiprocess_mode="max",
        )
        self.store_up = self._gauge(
            "reasoning_proxy_store_up",
            "1 when the store answered its last call.",
            multiprocess_mode="min",
        )
        # livesum: with several workers, the sum over the running processes
        self.upstream_in_flight = self._gauge(
            "reasoning_proxy_upstream_in_flight",
            "Upstream requests holding one of server.upstream_max_in_flight slots.",
            multiprocess_mode="livesum",
        )
        self.upstream_waiting = self._gauge(
            "reasoning_proxy_upstream_waiting",
            "Requests waiting for an upstream request slot.",
            multiprocess_mode="livesum",
        )
        self.upstream_errors = self._counter(
            "reasoning_proxy_upstream_errors",
            "Upstream failures, by route and kind (connect, timeout, status, malformed, "
            "disconnected, busy).",
            ["route", "kind"],
        )
        self.sealed_rejected = self._counter(
            "reasoning_proxy_sealed_rejected",
            "Sealed reasoning from clients that this proxy could not open (forged, another "
            "tenant's or another proxy's), by front door; it is ignored.",
            ["door"],
        )
        self.added_latency = self._histogram(
            "reasoning_proxy_added_latency_seconds",
            "Proxy time to first byte minus upstream time to first byte.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
        )

    def _counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
        if self._tally is not None:
            return self._tally.counter(name, documentation, labels)
        return Counter(name, documentation, labels, registry=self.registry)

    def _gauge(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        *,
        multiprocess_mode: Literal["max", "min", "livesum"],
    ) -> Any:
        if self._tally is not None:
            return self._tally.gauge(name, documentation, labels)
        return Gauge(
            name, documentation, labels, registry=self.registry, multiprocess_mode=multiprocess_mode
        )

    def _histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> Any:
        if self._tally is not None:
            return self._tally.histogram(name, documentation, labels, buckets=buckets)
        return Histogram(name, documentation, labels, buckets=buckets, registry=self.registry)

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: labels() validates and locks
        on every call, and a request touches several counters."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def upstream_load(self, in_flight: int, waiting: int) -> None:
        self.upstream_in_flight.set(in_flight)
        self.upstream_waiting.set(waiting)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition and its content type: OpenMetrics when the scraper's
        Accept asks for it, else the Prometheus text format."""
        encoder, content_type = choose_encoder(accept or "")
        if self.multiprocess:
            # every worker's files, added up; process_* would describe only
            # the worker that answers this scrape, so they are left out
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            PlatformCollector(registry=registry)
            return encoder(registry), content_type
        return encoder(self.registry), content_type


# -- logs ------------------------------------------------------------------------------

# Field names whose values are credentials. A name is compared lower-cased with
# `-` and `_` removed, so `api_key`, `apiKey`, `x-api-key` and `X_API_KEY` are
# one name; it is sensitive when it is `key` or ends in one of these suffixes
# (`access_token`, `client_secret`, `x-goog-api-key`, `proxy-authorization`).
# `max_tokens` and `prompt_tokens` end in `tokens`, so they stay; so do
# `prompt_cache_key` and `idempotency_key` (only api/access/private/secret
# keys count).
_SENSITIVE_EXACT = frozenset({"key"})
_SENSITIVE_SUFFIXES = (
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "cookie",
)


def sensitive_name(name: object) -> bool:
    """True when a field of this name holds a credential."""
    if isinstance(name, str):
        return _sensitive_text(name)
    if isinstance(name, bytes):
        return _sensitive_text(name.decode("latin-1"))
    return False


@functools.lru_cache(maxsize=4096)  # log lines repeat the same few names
def _sensitive_text(name: str) -> bool:
    folded = name.lower().replace("-", "").replace("_", "")
    return folded in _SENSITIVE_EXACT or folded.endswith(_SENSITIVE_SUFFIXES)


# The same names written as text: `"password": "x"`, `token=x`, `'apiKey': 'x'`.
# A quoted value is replaced up to its closing quote (or the end, when it was
# cut); an unquoted one up to a space, quote, comma, `&`, `;` or bracket.
_NAME_TEXT = (
    r"(?<![A-Za-z0-9_-])(?:key|[A-Za-z0-9_-]*?"
    r"(?:api[_-]?key|access[_-]?key|private[_-]?key|secret[_-]?key"
    r"|token|secret|passw(?:or)?d|cookie))"
)
_NAMED_VALUE = re.compile(
    r"(?i)(" + _NAME_TEXT + r"""['"]?\s*[:=]\s*)"""
    r"""("(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|[^\s'",;&}\])]+)"""
)


def _named_value(match: re.Match[str]) -> str:
    value = match.group(2)
    quote = value[0] if value[0] in "'\"" else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


# Key formats recognised by their prefix, wherever they appear. Each prefix
# needs a long run of key characters after it, so `sk-learn` or `hf_hub` stay.
_KEY_PREFIXES: tuple[tuple[str, int], ...] = (
    ("sk-", 6),  # OpenAI, Anthropic (sk-ant-), OpenRouter (sk-or-), DeepSeek
    ("gsk_", 20),  # Groq
    ("xai-", 20),  # xAI
    ("AIza", 30),  # Google
    ("hf_", 20),  # Hugging Face
    ("pplx-", 20),  # Perplexity
    ("r8_", 20),  # Replicate
    ("ghp_", 20),  # GitHub (personal, OAuth, user, server, refresh)
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("ghr_", 20),
    ("github_pat_", 20),
    ("sk_live_", 10),  # Stripe-style secret and restricted keys
    ("sk_test_", 10),
    ("rk_live_", 10),
    ("rk_test_", 10),
    ("xoxb-", 10),  # Slack
    ("xoxp-", 10),
)
_MIN_KEY_LENGTH = dict(_KEY_PREFIXES)
# one alternation after \b (every prefix starts with a word character), with
# the lengths checked on a match: as fast as the single `sk-` pattern was,
# where a lookbehind before 19 alternatives cost four times that
_PREFIXED_KEY = re.compile(
    r"\b("
    + "|".join(re.escape(p) for p, _ in sorted(_KEY_PREFIXES, key=lambda k: -len(k[0])))
    + rf")([A-Za-z0-9_\-]{{{min(_MIN_KEY_LENGTH.values())},}})"
)


def _prefixed_key(match: re.Match[str]) -> str:
    prefix, rest = match.groups()
    if len(rest) < _MIN_KEY_LENGTH[prefix]:
        return match.group(0)
    return prefix + REDACTED


_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",}]+"), r"\1 " + REDACTED),
    # an Authorization value runs to the end of the field: `Basic dXNl...`
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?!bearer\b)[^'\"\n,}]+"),
        r"\1" + REDACTED,
    ),
    (_NAMED_VALUE, _named_value),
    (_PREFIXED_KEY, _prefixed_key),
)

# What every text that one of the patterns changes contains: a sensitive
# name's core, "bearer" or "authorization" (in any case), or a key prefix.
# Checking that first passes most log fields (ids, paths, names) untouched:
# about 0.4 us a field, where the four substitutions cost about 6 us, most of
# a request's log line. Only ASCII text is screened: in other text, case
# folding can make a match of letters that lower() does not (the long s).
_CORES = ("key", "token", "secret", "passw", "cookie", "bearer", "authorization")
_PREFIX_SCREEN = re.compile("|".join(re.escape(p) for p, _ in _KEY_PREFIXES))  # \b aside


def _may_hold_credential(text: str) -> bool:
    if not text.isascii():
        return True
    low = text.lower()
    for core in _CORES:
        if core in low:
            return True
    return _PREFIX_SCREEN.search(text) is not None


# the memo of clean texts: texts up to CLEAN_TEXT characters, the last
# CLEAN_ENTRIES surely while they hold less than CLEAN_CHARS characters
CLEAN_TEXT = 256
CLEAN_ENTRIES = 4096
CLEAN_CHARS = 256 * 1024

_SCALARS = (str, int, float)
_ATOMS = frozenset({int, float, bool, type(None)})


class Redactor:
    """Removes credentials from log text and from structured fields.

    Text: every configured secret, bearer and Authorization values, values
    after a sensitive name (`"token": "x"`, `password=x`), and keys with a
    known prefix. Structures (dicts, lists, at any depth): the value of a
    field with a sensitive name (a dict key, or the first item of a
    two-item list such as a header pair) becomes REDACTED; when that value is itself a
    dict or list, its shape is kept and every string or number in it becomes
    REDACTED. Booleans and nulls stay: they are no secret."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first, so a secret that contains another is replaced whole;
        # each also as JSON and URLs write it (a quoted key in a logged body)
        forms = {f for s in secrets if s and len(s) >= 4 for f in encoded_forms(s)}
        self._secrets = sorted(forms, key=len, reverse=True)
        # short texts known to need nothing (routes, models, paths, ids: a log
        # line's fields repeat); a text that held a credential is not kept
        self._clean: Recent[str] = Recent(CLEAN_ENTRIES, CLEAN_CHARS, len)

    def __call__(self, text: str) -> str:
        short = len(text) <= CLEAN_TEXT
        if short and self._clean.get(text) is not None:
            return text
        out = text
        for secret in self._secrets:
            if secret in out:
                out = out.replace(secret, REDACTED)
        if _may_hold_credential(out):
            for pattern, replacement in _PATTERNS:
                out = pattern.sub(replacement, out)
        if short and out == text:
            self._clean.put(text, 1)
        return out

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, Mapping):
            return {k: self.field(k, v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            if len(value) == 2 and isinstance(value, list | tuple):
                name, item = value  # a (name, value) pair, as in header lists
                if sensitive_name(name):
                    return [self.value(name), _hidden(item)]
            return [self.value(v) for v in value]
        # anything else is logged as its str(): redact that
        return self(str(value))

    def field(self, name: object, value: Any) -> Any:
        """The value of field `name`, redacted."""
        return _hidden(value) if sensitive_name(name) else self.value(value)


def _hidden(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, _SCALARS):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_hidden(v) for v in value]
    return REDACTED


# record attributes that are not extra fields (uvicorn adds an ANSI-coloured
# copy of its message, which a log line does not need)
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


# What a client writes into a line (a path, a model name, dropped field
# names) is kept to this many characters: the rest is counted, not written.
FIELD_LIMIT = 200


def clip(text: str, limit: int = FIELD_LIMIT) -> str:
    """`text`, or its first `limit` characters and how many more there were."""
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit})"


class RedactingFilter(logging.Filter):
    """Renders each record's message and traceback, then redacts them; a
    string field is redacted, then cut to FIELD_LIMIT characters."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = self.redact(self._formatter.formatException(record.exc_info))
            record.exc_info = None
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        fields = record.__dict__
        self.fields(fields, fields.keys() - _STANDARD)
        return True

    def fields(self, fields: dict[str, Any], names: Iterable[str]) -> None:
        """`Redactor.field` on each of `names` in `fields`, in place, with its
        common cases inline (a request's line has about 18 fields, most of
        them short strings and numbers)."""
        redact = self.redact
        for key in names:  # (attribute names: str)
            value = fields[key]
            kind = type(value)
            if kind is str:
                # redacted whole first: a cut could leave too little of a key to know it
                fields[key] = REDACTED if _sensitive_text(key) else clip(redact(value))
            elif kind in _ATOMS:
                if _sensitive_text(key):
                    fields[key] = _hidden(value)
            else:
                fields[key] = redact.field(key, value)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class _Stamp:
    """A record's time as text, the part down to the second made once per
    second (strftime and gmtime are most of the cost)."""

    __slots__ = ("_clock", "_format", "_second", "_text")

    def __init__(self, fmt: str, *, local: bool) -> None:
        self._format = fmt
        self._clock = time.localtime if local else time.gmtime
        self._second = -1
        self._text = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second, self._text = second, time.strftime(self._format, self._clock(second))
        return self._text


def _json_line(data: dict[str, Any]) -> str:
    """One log line's JSON: orjson (a sixth of the stdlib's cost per line),
    else the stdlib for what orjson refuses (an int past 64 bits, a lone
    surrogate)."""
    try:
        return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(data, ensure_ascii=False, default=str)


class Line(NamedTuple):
    """What a log line shows: a record's parts, or the same parts without one."""

    created: float
    msecs: int
    level: str
    logger: str
    pid: int | None
    msg: str
    fields: dict[str, Any]
    exc: str | None = None


class LineFormatter(logging.Formatter):
    """A formatter whose line is made from a record's parts (`line`), so
    `LogHandler.write` makes the same line without a record."""

    def format(self, record: logging.LogRecord) -> str:
        return self.line(
            Line(
                record.created,
                int(record.msecs),
                record.levelname,
                record.name,
                record.process,
                record.getMessage(),
                _extras(record),
                record.exc_text,
            )
        )

    def line(self, parts: Line) -> str:
        raise NotImplementedError


class JsonFormatter(LineFormatter):
    def __init__(self) -> None:
        super().__init__()
        self._stamp = _Stamp("%Y-%m-%dT%H:%M:%S", local=False)

    def line(self, parts: Line) -> str:
        data: dict[str, Any] = {
            "ts": f"{self._stamp(parts.created)}.{parts.msecs:03d}Z",
            "level": parts.level.lower(),
            "logger": parts.logger,
            "pid": parts.pid,  # which worker, with --workers
            "msg": parts.msg,
            **parts.fields,
        }
        if parts.exc:
            data["exc"] = parts.exc
        return _json_line(data)


# Characters a text line shows as backslash escapes: C0 and C1 controls and
# DEL (a line break would start a forged line, ESC drive the terminal), the
# Unicode line and paragraph separators, the bidirectional controls (which
# reorder what a terminal shows), and the backslash itself, so that `\n` in
# a line is always an escaped line break.
_BIDI_AND_SEPARATORS = r"\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\\" + _BIDI_AND_SEPARATORS + "]")
# in a traceback: the same, but its own line breaks and backslashes stay
_UNSAFE_TRACEBACK = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f" + _BIDI_AND_SEPARATORS + "]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
# a field value that would read as more than one field is quoted (logfmt's way)
_NEEDS_QUOTES = re.compile(r'[ "=]')


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def text_safe(text: str) -> str:
    r"""`text` as one line of a terminal's text: control characters as
    backslash escapes (`\n`, `\x1b`, `\u2028`), a backslash doubled."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def _text_value(value: Any) -> str:
    text = text_safe(value if type(value) is str else str(value))
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace('"', '\\"') + '"'


class TextFormatter(LineFormatter):
    """`time level [pid] logger: message key=value ...`: one line per record
    (a traceback follows on its own lines), whatever its message and fields
    hold: control characters are escaped, and a value with a space, `"` or
    `=` is quoted."""

    def __init__(self) -> None:
        super().__init__()
        self._stamp = _Stamp("%Y-%m-%d %H:%M:%S", local=True)

    def line(self, parts: Line) -> str:
        stamp = self._stamp(parts.created)
        line = f"{stamp} {parts.level:<7} [{parts.pid}] {parts.logger}: {text_safe(parts.msg)}"
        if parts.fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in parts.fields.items())
        if parts.exc:
            line += "\n" + _UNSAFE_TRACEBACK.sub(_escape, parts.exc)
        return line


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs: a stream, the redacting
    filter and a line formatter. `write` makes a record's line without the
    record (see `log_fields`)."""

    def __init__(self, stream: Any, redacting: RedactingFilter, formatter: LineFormatter) -> None:
        super().__init__(stream)
        self.redacting = redacting
        self.lines = formatter
        self.addFilter(redacting)
        self.setFormatter(formatter)

    def write(self, level: int, logger: str, msg: str, fields: dict[str, Any]) -> None:
        """What `emit` writes for a record of these parts (`fields` as its
        extra), redacted and formatted the same way: redacted first, then
        formatted and written under the handler's lock, as `handle` does."""
        created = time.time()
        try:
            redacting = self.redacting
            redacting.fields(fields, fields.keys())
            parts = Line(
                created,
                int((created - int(created)) * 1000),
                logging.getLevelName(level),
                logger,
                os.getpid() if logging.logProcesses else None,
                redacting.redact(msg),
                fields,
            )
            self.acquire()
            try:
                self.stream.write(self.lines.line(parts) + self.terminator)
                self.stream.flush()
            finally:
                self.release()
        except RecursionError:
            raise
        except Exception:
            self.handleError(logging.makeLogRecord({"name": logger, "msg": msg, "levelno": level}))


def _only_handler(logger: logging.Logger, level: int) -> LogHandler | None:
    """The `LogHandler` a record of `level` from `logger` would reach and
    nothing else would: no other handler, no filter on the way."""
    found: LogHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters or node.disabled:
            return None
        for handler in node.handlers:
            if found is not None or type(handler) is not LogHandler:
                return None
            found = handler
        if not node.propagate:
            break
        node = node.parent
    if found is None or level < found.level or found.filters != [found.redacting]:
        return None
    return found


def log_fields(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, msg, extra=fields)`, the same line, at a third of
    the cost when the handler `configure_logging` installed is the only one
    in the way: written directly, without a `LogRecord`, the logger's and
    the handler's dispatch (about 12 of a line's 20 us, measured in a loop).
    Anything else in the way (another handler, a filter: a test's log
    capture) gets the record. `fields` is redacted in place."""
    if not logger.isEnabledFor(level):
        return
    handler = _only_handler(logger, level)
    if handler is None:
        logger.log(level, "%s", msg, extra=fields)
    else:
        handler.write(level, logger.name, msg, fields)


def configure_logging(level: str, fmt: str, secrets: Sequence[str] = ()) -> None:
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler = LogHandler(sys.stderr, RedactingFilter(Redactor(secrets)), formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    # aiohttp and asyncio at DEBUG are noise, not request information
    for name in ("asyncio", "aiohttp", "multipart", "charset_normalizer"):
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
    # No line shows a record's thread, process name or source line: skip
    # collecting them (the logging HOWTO's "Optimization"; the calling frame's
    # lookup alone was about 16,000 instructions of every access line).
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging._srcfile = None


def truncate(value: Any, limit: int = FIELD_LIMIT) -> Any:
    """A body for --log-bodies: every long string cut to `limit` characters."""
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        return {k: truncate(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [truncate(v, limit) for v in value]
    return value
