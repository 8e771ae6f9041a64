"""Shared fixtures and settings. HYPOTHESIS_PROFILE=deep runs the property
tests with many more examples (slow; for local hunting, not CI)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.harness import FakeUpstream, closed_port
from tests.messages_wire import OPEN_CLIENTS
from tests.stores.servers import RedisServer

settings.register_profile("default", deadline=None, max_examples=150)
settings.register_profile(
    "deep", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session (Debian's package), on a free port."""
    with tempfile.TemporaryDirectory(prefix="rp-redis-") as directory:
        server = RedisServer(Path(directory)).start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def other() -> Iterator[FakeUpstream]:
    """A second upstream, of the test alone: one route's upstream beside
    another's (`upstream`)."""
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port where connections are refused for the whole test (see
    `closed_port`): an upstream or store that is down."""
    with closed_port() as port:
        yield port


@pytest.fixture
def upstream(upstream_server: FakeUpstream) -> FakeUpstream:
    upstream_server.reset()
    return upstream_server


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    """Close the anthropic SDK clients a test opened (tests.messages_wire)."""
    yield
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Restores what configure_logging changes: the root logger's handlers
    and level, and the record fields that logging collects."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    flags = (logging.logThreads, logging.logMultiprocessing, logging._srcfile)
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        logging.logThreads, logging.logMultiprocessing, logging._srcfile = flags
