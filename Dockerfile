# reasoning-proxy: the proxy as a container image.
#
#   docker build -t reasoning-proxy .
#   docker run --rm -p 127.0.0.1:8787:8787 \
#     -e REASONING_PROXY_UPSTREAM=https://api.deepseek.com \
#     -e REASONING_PROXY_SECRET="$(openssl rand -hex 32)" reasoning-proxy
#
# Configured from the environment, exactly like `reasoning-proxy serve`:
#   REASONING_PROXY_CONFIG       a config file, e.g. /etc/reasoning-proxy/kimi.yaml
#                                (the examples from config/ are in the image)
#   REASONING_PROXY_UPSTREAM     or one catch-all upstream base URL (not both)
#   REASONING_PROXY_STORE        store URL, e.g. redis://redis:6379/0
#   REASONING_PROXY_SECRET       tenant HMAC secret (unset, a durable store keeps one)
#   REASONING_PROXY_ADMIN_TOKEN  admin token (writes profiles, sees every tenant)
# The server always listens on 0.0.0.0:8787 inside the container (the
# command line overrides a config file's server.host and server.port).
# The demo (simulated upstream, no keys) instead:
#   docker run --rm -p 127.0.0.1:8787:8787 reasoning-proxy reasoning-proxy demo --host 0.0.0.0
#
# Build arguments and secrets:
#   --build-arg BASE=...    the Python base image (Debian-based, Python 3.11+,
#                           with pip and venv); default below
#   --build-arg COMPILE=0   a pure-Python image; by default (1) the hot path is
#                           compiled with mypyc (README "Compiled build"), for which
#                           the build stage installs gcc (and the Python headers
#                           when the base lacks them) from Debian and mypy from
#                           PyPI; the image holds none of them
#   --build-arg EXTRAS=aiohttp
#                           optional extras of the package, comma-separated;
#                           `aiohttp` for `server.upstream_client: aiohttp`
#                           (by default the image holds the built-in client only)
#   --secret id=cacert,src=/path/to/ca-bundle.crt
#                           optional: a CA bundle for pip, for networks that
#                           inspect TLS; the build works without it

ARG BASE=python:3.12-slim
ARG COMPILE=1
ARG EXTRAS=

# -- build: wheels for the project and its runtime dependencies --------------------
FROM ${BASE} AS build
ARG COMPILE
ARG EXTRAS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Dependencies first (from pyproject.toml alone), so that a code change does
# not download them again. Only [project].dependencies and the extras EXTRAS
# names: never the dev extra.
COPY pyproject.toml ./
RUN --mount=type=secret,id=cacert \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    python -c 'import os, sys, tomllib; \
project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
extras = [e.strip() for e in os.environ.get("EXTRAS", "").split(",") if e.strip()]; \
known = sorted(set(project["optional-dependencies"]) - {"dev"}); \
bad = [e for e in extras if e not in known]; \
bad and sys.exit(f"EXTRAS: no extra {bad[0]!r} (the image takes {known})"); \
print("\n".join(project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]))' \
        > requirements.txt; \
    python -m pip wheel --wheel-dir /wheels -r requirements.txt

# The compiler for the compiled build (this stage only; the image has none).
RUN set -e; \
    if [ "$COMPILE" = 1 ]; then \
        need="gcc libc6-dev"; \
        python -c 'import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))' \
            || need="$need python3-dev"; \
        apt-get update -qq; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need > /dev/null; \
        rm -rf /var/lib/apt/lists/*; \
    fi

COPY README.md setup.py ./
COPY proxy ./proxy
RUN --mount=type=secret,id=cacert \
    set -e; \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    REASONING_PROXY_COMPILE=$COMPILE python -m pip wheel --no-deps --find-links /wheels \
        --wheel-dir /wheels .; \
    cd /wheels && sha256sum -- *.whl > SHA256SUMS

# -- runtime: the wheel installed into a venv, run as an unprivileged user ---------
FROM ${BASE}
ARG EXTRAS
LABEL org.opencontainers.image.title="reasoning-proxy" \
      org.opencontainers.image.description="OpenAI-compatible proxy that separates, stores and re-injects model reasoning" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/reasoning-proxy/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

RUN groupadd --system --gid 10001 reasoning-proxy \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/reasoning-proxy \
        --no-create-home --shell /usr/sbin/nologin reasoning-proxy \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/reasoning-proxy

# Installed from the build stage's wheels only (no index): exactly the
# project's runtime dependencies. The wheels are mounted, not copied, so they
# take no room in the image; their checksums are copied first, which ties the
# install step's cache to the wheels' content (some builders key a mounted
# stage's cache on the command text alone) and is checked before installing.
COPY --from=build /wheels/SHA256SUMS /opt/reasoning-proxy.wheels.sha256
RUN --mount=type=bind,from=build,source=/wheels,target=/tmp/wheels \
    (cd /tmp/wheels && sha256sum --quiet --check /opt/reasoning-proxy.wheels.sha256) \
 && python -m venv /opt/reasoning-proxy \
 && /opt/reasoning-proxy/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        "reasoning-proxy${EXTRAS:+[$EXTRAS]}" \
 && reasoning-proxy --help > /dev/null

COPY config/ /etc/reasoning-proxy/

# The working directory is writable: relative SQLite URLs
# (sqlite:///reasoning-proxy.db) land here; mount a volume to keep them.
WORKDIR /var/lib/reasoning-proxy
USER 10001:10001
EXPOSE 8787

# Python's standard library only (slim images have no curl); proxies from the
# environment are ignored for this local request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request as r; r.build_opener(r.ProxyHandler({})).open('http://127.0.0.1:8787/healthz', timeout=4)"]

CMD ["reasoning-proxy", "serve", "--host", "0.0.0.0", "--port", "8787"]
