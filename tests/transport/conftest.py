"""Fixtures of the transport suites: every test runs once per real transport."""

from __future__ import annotations

import ssl

import pytest
import trustme

CLIENTS = ["builtin", "aiohttp"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    """The `server.upstream_client` under test."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def server_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    return context
