"""Metrics (Prometheus) and logs (one line per request, redacted).

`Metrics` owns the counters in a registry of its own (several apps in one
process do not collide). With several workers, prometheus-client's
multi-process mode is used: the CLI points PROMETHEUS_MULTIPROC_DIR at a
fresh directory before the workers start, and /metrics aggregates the files.

`configure_logging` installs one handler on the root logger (uvicorn's
loggers propagate to it) with a redacting filter: Authorization values,
`api_key` values, `sk-...` tokens and every configured secret are replaced
in the message, its arguments, extra fields and tracebacks.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REDACTED = "[REDACTED]"


class Metrics:
    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "reasoning_proxy_requests",
            "Requests answered, by route and status.",
            ["route", "endpoint", "status"],
            registry=r,
        )
        self.streams = Counter(
            "reasoning_proxy_streams",
            "Streamed responses, by route and how they ended.",
            ["route", "outcome"],
            registry=r,
        )
        self.reasoning_blocks = Counter(
            "reasoning_proxy_reasoning_blocks",
            "Reasoning blocks extracted, by source field.",
            ["source"],
            registry=r,
        )
        self.delimiters = Counter(
            "reasoning_proxy_delimiters_stripped",
            "Reasoning tag delimiters removed from answers.",
            registry=r,
        )
        self.reinjected = Counter(
            "reasoning_proxy_turns_reinjected",
            "Assistant messages sent upstream with reasoning from the store, by dialect.",
            ["dialect"],
            registry=r,
        )
        self.stripped = Counter(
            "reasoning_proxy_turns_stripped",
            "Assistant messages whose known reasoning was not sent upstream, by dialect.",
            ["dialect"],
            registry=r,
        )
        self.compressions = Counter(
            "reasoning_proxy_compressions",
            "Requests whose strip policy was tightened to fit the context, by policy.",
            ["policy"],
            registry=r,
        )
        self.store_ops = Counter(
            "reasoning_proxy_store_operations",
            "Store operations, by operation and result.",
            ["op", "result"],
            registry=r,
        )
        # (multiprocess_mode only matters when several workers write files)
        self.store_conversations = Gauge(
            "reasoning_proxy_store_conversations",
            "Conversations in the store.",
            registry=r,
            multiprocess_mode="max",
        )
        self.store_bytes = Gauge(
            "reasoning_proxy_store_bytes",
            "Bytes the store reports holding.",
            registry=r,
            multiprocess_mode="max",
        )
        self.store_up = Gauge(
            "reasoning_proxy_store_up",
            "1 when the store answered its last call.",
            registry=r,
            multiprocess_mode="min",
        )
        self.upstream_errors = Counter(
            "reasoning_proxy_upstream_errors",
            "Upstream failures, by route and kind (connect, timeout, status, malformed).",
            ["route", "kind"],
            registry=r,
        )
        self.added_latency = Histogram(
            "reasoning_proxy_added_latency_seconds",
            "Proxy time to first byte minus upstream time to first byte.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: labels() validates and locks
        on every call, and a request touches several counters."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def render(self) -> tuple[bytes, str]:
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# -- logs ------------------------------------------------------------------------------

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",}]+"), r"\1 " + REDACTED),
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?!bearer\b)[^'\"\n,}]+"),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)(api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"), r"\1" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-" + REDACTED),
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first, so a secret that contains another is replaced whole
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


# record attributes that are not extra fields (uvicorn adds an ANSI-coloured
# copy of its message, which a log line does not need)
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class RedactingFilter(logging.Filter):
    """Renders each record's message and traceback, then redacts them."""

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
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD:
                setattr(record, key, self.redact.value(value))
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_text:
            line += "\n" + record.exc_text
        return line


def configure_logging(level: str, fmt: str, secrets: Sequence[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter(Redactor(secrets)))
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
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


def truncate(value: Any, limit: int = 200) -> Any:
    """A body for --log-bodies: every long string cut to `limit` characters."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"…(+{len(value) - limit})"
    if isinstance(value, dict):
        return {k: truncate(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [truncate(v, limit) for v in value]
    return value
