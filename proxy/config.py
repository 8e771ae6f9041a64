"""Configuration: YAML (or command-line options) -> a frozen `Config` value.

The file is validated strictly: unknown keys are errors, values are checked,
`${VAR}` and `${VAR:-default}` are expanded from the environment (an unset
variable without a default is an error). Secrets (`api_key`, `admin_token`,
`secret`) are kept in `Secret` wrappers that never print their value.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from proxy.dialects import (
    DEFAULT_DIALECT,
    DIALECT_NAMES,
    DIALECTS,
    MAKERS,
    Dialect,
    DialectSource,
    host_dialect,
)
from proxy.errors import ConfigError
from proxy.http1.egress import EnvProxies, ProxyURL
from proxy.reasoning.tags import DEFAULT_TAGS, TagSet
from proxy.settings import Overrides, config_overrides

ENV_CONFIG = "REASONING_PROXY_CONFIG"
ENV_UPSTREAM = "REASONING_PROXY_UPSTREAM"
ENV_STORE = "REASONING_PROXY_STORE"
ENV_ADMIN_TOKEN = "REASONING_PROXY_ADMIN_TOKEN"
ENV_SECRET = "REASONING_PROXY_SECRET"
ENV_DIALECT = "REASONING_PROXY_DIALECT"
ENV_IMPLICIT_OPEN_TAG = "REASONING_PROXY_IMPLICIT_OPEN_TAG"
# a true/false variable's spellings (any case), those a config file's
# `implicit_open_tag: ${VAR}` takes too; empty is false
FLAG_TRUE = frozenset(("1", "true", "yes", "on", "t", "y"))
FLAG_FALSE = frozenset(("", "0", "false", "no", "off", "f", "n"))

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# a `${` that _VAR does not take (a shell's `${VAR:?message}`, `${VAR-default}`,
# an unclosed `${VAR`): refused, never kept as text (a route key of that text)
_OTHER_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)?")

# what carries a caller's credential: a client's never goes to a route with
# its own key, and a route that sets one in `headers:` has its own key
CREDENTIAL_HEADERS = frozenset(
    ("authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie", "proxy-authorization")
)


class Secret:
    """A string that does not show itself in reprs, logs or printed configs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# -- the file's schema (pydantic, strict) -----------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeoutsModel(_Model):
    connect: float = Field(10.0, gt=0, description="seconds to open the upstream connection")
    idle: float = Field(
        300.0,
        gt=0,
        description="seconds without a byte from the upstream (before its headers, or "
        "between reads) before the request fails; not a cap on total time",
    )


class TagPairModel(_Model):
    open: str
    close: str


class TagPresetModel(_Model):
    preset: str


class RouteModel(_Model):
    name: str = Field(min_length=1, max_length=64)
    models: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    upstream: str
    api_key: SecretStr | None = None
    # auto: from the upstream host, else per request from the model name
    dialect: str = "auto"
    reasoning: dict[str, Any] = Field(default_factory=dict)
    context_limit: int | None = Field(None, gt=0)
    compression_threshold: float = Field(0.85, gt=0, le=1)
    implicit_open_tag: bool = False
    # `<name>` tags, {open, close} pairs and {preset: harmony | magistral | kimi_vl};
    # [] turns parsing off
    tags: list[str | TagPairModel | TagPresetModel] = Field(
        default_factory=lambda: list[str | TagPairModel | TagPresetModel](DEFAULT_TAGS)
    )
    tags_only_at_start: bool = False
    answer_tags: list[str] = Field(default_factory=list)
    tool_call_markers: list[str] = Field(default_factory=list)
    timeouts: TimeoutsModel = Field(default_factory=TimeoutsModel)
    headers: dict[str, str] = Field(default_factory=dict)
    # an HTTP proxy for this route's requests: http://[user:password@]host:port
    upstream_proxy: str | None = None
    # what the upstream speaks: every front door translates to `chat`; a door
    # of the upstream's own API passes through (normalized)
    api: Literal["chat", "responses", "messages"] = "chat"
    # with the route's own key, the upstream account's stored objects (files,
    # batches, vector stores, ...) are one for every client: refused unless
    # the operator says they may be shared
    shared_objects: bool = False

    @field_validator("upstream")
    @classmethod
    def _upstream_url(cls, value: str) -> str:
        # (urlsplit drops tabs and newlines where it finds them: checked first)
        if any(c.isspace() or c < " " or c == "\x7f" for c in value):
            raise ValueError("must not contain spaces or control characters")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if "@" in parts.netloc:  # (never echoed: the error names no part of it)
            raise ValueError(
                "must not carry credentials (user:password@): a route's key goes in "
                "api_key or headers"
            )
        if not valid_host(parts.hostname):
            raise ValueError(
                "must have a valid host: an IP address or a name of letters, digits, '-', "
                "'_' and '.' (an internationalized name in its xn-- form)"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        try:
            port = parts.port  # not a number, or past 65535: ValueError
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError("must have a port from 1 to 65535")
        return value.rstrip("/")

    @field_validator("dialect")
    @classmethod
    def _dialect_name(cls, value: str) -> str:
        if value not in DIALECT_NAMES:
            raise ValueError("must be one of: " + ", ".join(DIALECT_NAMES))
        return value

    @field_validator("upstream_proxy")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        if value is not None:
            ProxyURL.parse(value)  # its ValueError says what is wrong
        return value

    @field_validator("headers")
    @classmethod
    def _header_values(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if any(c in name + text for c in "\r\n\0") or not name.strip():
                raise ValueError("header names and values must not contain CR, LF or NUL")
            if not (name + text).isascii() and max(name + text) > "\xff":
                # sent as latin-1, one byte per character (what clients' bytes are read as)
                raise ValueError("header names and values must be latin-1 characters")
        return value

    @field_validator("api_key")
    @classmethod
    def _api_key_sendable(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_header_secret(value.get_secret_value())
        return value


def check_header_secret(value: str) -> None:
    """ValueError, never naming the value, when a key or token could not
    travel in an HTTP header as written: CR, LF or NUL in it (a file's
    trailing newline, through `${VAR}` or a Kubernetes secret), a space or
    tab at either end (a client cannot send one: the server drops it), or a
    character past latin-1. Such a route key fails every request; such an
    admin token matches none."""
    if any(c in value for c in "\r\n\0"):
        raise ValueError("must not contain CR, LF or NUL (a file's trailing newline?)")
    if value != value.strip(" \t"):
        raise ValueError("must not begin or end with a space or tab")
    if not value.isascii() and max(value) > "\xff":
        raise ValueError("must be latin-1 characters")


_HOST_LABEL = re.compile(r"[A-Za-z0-9_-]{1,63}")


def valid_host(host: str) -> bool:
    """An IP address, or a DNS name as a resolver takes it: dot-separated
    labels of ASCII letters, digits, '-' and '_' (a container's service name
    may hold one), at most 253 characters, a final dot allowed."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


class ServerModel(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    workers: int = Field(1, ge=1, le=64)
    require_auth: bool = False
    admin_token: SecretStr | None = None
    secret: SecretStr | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    log_bodies: bool = False
    shutdown_grace_seconds: float = Field(25.0, ge=0, le=3600)
    # a client's request: seconds for its head to arrive (from the connection's
    # opening or the previous response), and the longest gap in its body
    request_header_timeout: float = Field(30.0, gt=0, le=3600)
    request_body_timeout: float = Field(30.0, gt=0, le=3600)
    # the longest a client may leave its connection too full to write to
    # (it reads nothing of its answer) before the connection is closed
    response_send_timeout: float = Field(60.0, gt=0, le=3600)
    upstream_max_in_flight: int = Field(512, ge=1)
    upstream_queue_timeout: float = Field(5.0, ge=0)
    upstream_max_connections_per_origin: int = Field(512, ge=1)
    upstream_keepalive_seconds: float = Field(30.0, gt=0)
    # HTTP_PROXY, HTTPS_PROXY and NO_PROXY are read only when this is true
    trust_env: bool = False
    upstream_client: Literal["builtin", "aiohttp"] = "builtin"
    # web pages (an `Origin` other than this server's own) allowed to call it;
    # "*": any. Clients that are not browsers send no Origin and are not affected.
    allowed_origins: list[str] = Field(default_factory=list)
    # names a request may be sent to (its Host) besides IP addresses,
    # localhost and this machine's name; checked when listening on loopback,
    # or always once names are listed; "*": any (see proxy/hosts.py)
    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("host")
    @classmethod
    def _listen_host(cls, value: str) -> str:
        # an empty host binds every interface: never by accident (an unset
        # `--host "$HOST"` or `host: ${HOST:-}`), only as 0.0.0.0 or ::
        if not valid_host(value):
            raise ValueError(
                "must be an IP address or a host name (0.0.0.0 or :: listens on every "
                "interface, 127.0.0.1 on this machine only)"
            )
        return value

    @field_validator("admin_token")
    @classmethod
    def _admin_token_sendable(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_header_secret(value.get_secret_value())
        return value


MAX_TTL_SECONDS = 10 * 365 * 24 * 3600  # ten years


class StoreModel(_Model):
    url: str = "memory://"
    max_conversations: int = Field(10_000, ge=1)
    max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    ttl_seconds: int = Field(7 * 24 * 3600, ge=1)
    max_turns_per_conversation: int = Field(1000, ge=1)

    @field_validator("ttl_seconds")
    @classmethod
    def _ttl_bound(cls, value: int) -> int:
        # one bound for every store: past Redis's range its expiries fail
        # (every write then fails halfway, leaving keys without a TTL)
        if value > MAX_TTL_SECONDS:
            raise ValueError(f"must be at most {MAX_TTL_SECONDS} (ten years)")
        return value


class LimitsModel(_Model):
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(8192, ge=256)
    # a request's head: headers, and bytes of its target and every header
    # name and value (431 past either; proxy/http_server.py)
    max_header_count: int = Field(100, ge=10, le=10_000)
    max_head_bytes: int = Field(64 * 1024, ge=1024)
    max_sse_line_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_reasoning_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_response_bytes: int = Field(64 * 1024 * 1024, ge=1024)

    @model_validator(mode="after")
    def _head_holds_a_header(self) -> LimitsModel:
        if self.max_head_bytes < self.max_header_bytes:
            raise ValueError("max_head_bytes must be at least max_header_bytes")
        return self


class UiModel(_Model):
    # each turn's input (the user's last message, tool results) is stored
    # with it and shown in the inspector; off, it is not stored at all
    show_prompts: bool = False


class ConfigModel(_Model):
    server: ServerModel = Field(default_factory=ServerModel)
    store: StoreModel = Field(default_factory=StoreModel)
    limits: LimitsModel = Field(default_factory=LimitsModel)
    ui: UiModel = Field(default_factory=UiModel)
    defaults: dict[str, Any] = Field(default_factory=dict)
    routes: list[RouteModel] = Field(min_length=1)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)


# -- the resolved, frozen value -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    models: tuple[str, ...]
    upstream: str
    api_key: Secret | None
    dialect: Dialect
    reasoning: Overrides
    context_limit: int | None
    compression_threshold: float
    implicit_open_tag: bool
    tags: TagSet
    connect_timeout: float
    idle_timeout: float
    headers: tuple[tuple[str, str], ...] = ()
    upstream_proxy: ProxyURL | None = None
    api: Literal["chat", "responses", "messages"] = "chat"
    shared_objects: bool = False
    # where `dialect` came from: the config, the upstream host, or nowhere
    # (then the model name decides per request, else openai)
    dialect_source: DialectSource = "config"
    # the route sends its own credential, `api_key` or a credential header in
    # `headers:`: its upstream sees every client as one caller (set from
    # those two; read on every request)
    keyed: bool = field(init=False)
    # the lower-cased names of `headers:`: a client's header of such a name
    # is not sent, the route's value goes in its place
    header_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = frozenset(name.lower() for name, _ in self.headers)
        object.__setattr__(self, "header_names", names)
        object.__setattr__(
            self, "keyed", self.api_key is not None or bool(names & CREDENTIAL_HEADERS)
        )

    @property
    def catch_all(self) -> bool:
        return "*" in self.models

    def matches(self, model: str) -> bool:
        lowered = model.lower()
        return any(fnmatch.fnmatchcase(lowered, glob.lower()) for glob in self.models)


@dataclass(frozen=True, slots=True)
class Config:
    routes: tuple[Route, ...]
    defaults: Overrides = field(default_factory=dict)
    profiles: Mapping[str, Overrides] = field(default_factory=dict)
    server: ServerModel = field(default_factory=ServerModel)
    store: StoreModel = field(default_factory=StoreModel)
    limits: LimitsModel = field(default_factory=LimitsModel)
    ui: UiModel = field(default_factory=UiModel)
    admin_token: Secret | None = None
    secret: Secret | None = None
    source: str = "<options>"

    def secret_values(self) -> list[str]:
        """Every configured secret (route keys and headers, the admin token,
        the tenant secret), for the log redactor."""
        values = [r.api_key.get() for r in self.routes if r.api_key is not None]
        values += [v for _, v in (h for r in self.routes for h in r.headers)]
        for secret in (self.admin_token, self.secret):
            if secret is not None:
                values.append(secret.get())
        return values

    def route_for(self, model: str | None) -> Route | None:
        """The first route whose glob matches; without a model, the first
        catch-all route, else the first route."""
        if model is None:
            return next((r for r in self.routes if r.catch_all), self.routes[0])
        return next((r for r in self.routes if r.matches(model)), None)


def expand_env(value: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Expand ${VAR} and ${VAR:-default} in every string of a YAML tree:
    the default when VAR is unset or empty; without one, an unset or empty
    VAR is an error."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if default is not None:
                # as in a shell and in Compose: the default stands in for an
                # unset variable and for an empty one
                return env.get(name) or default
            if env.get(name):
                return env[name]
            # empty is refused too: an empty `api_key: ${KEY}` would forward the
            # clients' own keys, an empty `secret:` draw a random one
            said = "is empty" if name in env else "is not set"
            raise ConfigError(
                f"{where or 'config'}: environment variable {name} {said} "
                f"(${{{name}:-default}} gives a default)"
            )

        other = _OTHER_VAR.search(_VAR.sub(lambda m: m.group(2) or "", value))
        if other is not None:
            name = other.group(1) or "VAR"
            raise ConfigError(
                f"{where or 'config'}: ${{{name}...}} is not expanded: only ${{{name}}} and "
                f"${{{name}:-default}} are, and not inside a default"
            )
        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: expand_env(v, env, f"{where}.{k}" if where else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [expand_env(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


# pydantic names a union's alternatives in an error's location, and a
# model's class in its message: the file's own words instead
_ALTERNATIVES = frozenset(("str", "TagPairModel", "TagPresetModel"))
_UNION_SAYS = {"tags": "must be a tag name, an {open, close} pair or a {preset} mapping"}


def _message(err: ErrorDetails) -> str:
    """One validation error in the file's (or the flag's) own words."""
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "value_error":
        # pydantic's "Value error, " before the validator's own words
        return str(err.get("ctx", {}).get("error", err["msg"]))
    if err["type"] == "model_type":
        return "must be a mapping (key: value)"
    return err["msg"]


def _boolean_key(err: ErrorDetails) -> str | None:
    """What is wrong with a mapping key that YAML read as a boolean (an
    unquoted `off`, `on`, `yes`, `no`: YAML 1.1's booleans), which pydantic
    reports as a key (`[key]`, after it as 0 or 1) that is not a string;
    None for other errors."""
    loc, key = err["loc"], err.get("input")
    if len(loc) < 2 or loc[-1] != "[key]" or not isinstance(key, bool):
        return None
    what = "a profile name" if loc[:-2] == ("profiles",) else "a key"
    spellings, example = ("on, yes, true", "on") if key else ("off, no, false", "off")
    return (
        f"{what} is read as the boolean {str(key).lower()} (YAML reads unquoted "
        f'{spellings} so): quote it ("{example}", not {example})'
    )


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for err in exc.errors():
        where = ""
        key = ""  # the last key named before an index
        loc = err["loc"]
        message = _boolean_key(err)
        if message is not None:
            loc = loc[:-2]  # (the key itself is no place to name)
        else:
            message = _message(err)
        for part in loc:
            if isinstance(part, str) and part in _ALTERNATIVES:
                message = _UNION_SAYS.get(key, "not one of the forms allowed here")
                break
            if isinstance(part, str):
                key = part
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        line = f"  {where or '(top level)'}: {message}"
        if line not in lines:  # one line for all of a union's alternatives
            lines.append(line)
    return "\n".join(lines)


def build_config(
    data: Any, *, env: Mapping[str, str] | None = None, source: str = "<config>"
) -> Config:
    """Validate a parsed YAML document and resolve it into a Config."""
    env = os.environ if env is None else env
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the file must hold a mapping (server, routes, ...)")
    try:
        data = expand_env(data, env)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        model = ConfigModel.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    try:
        defaults = config_overrides(model.defaults, "defaults")
        profiles = {
            name: config_overrides(values or {}, f"profiles.{name}")
            for name, values in model.profiles.items()
        }
        routes = tuple(_route(r, i) for i, r in enumerate(model.routes))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if model.server.trust_env:
        try:
            EnvProxies.from_env(env)
        except ValueError as exc:
            raise ConfigError(f"{source}: server.trust_env: {exc}") from None
    names = [r.name for r in routes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{source}: route names must be unique: {', '.join(duplicates)}")
    for name in model.profiles:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
            raise ConfigError(f"{source}: profile name {name!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    admin = _plain(model.server.admin_token) or env.get(ENV_ADMIN_TOKEN)
    if admin and not _plain(model.server.admin_token):  # from the environment
        try:
            check_header_secret(admin)
        except ValueError as exc:
            raise ConfigError(f"{source}: {ENV_ADMIN_TOKEN}: {exc}") from None
    secret = _plain(model.server.secret) or env.get(ENV_SECRET)
    return Config(
        routes=routes,
        defaults=defaults,
        profiles=profiles,
        server=model.server,
        store=model.store,
        limits=model.limits,
        ui=model.ui,
        admin_token=Secret(admin) if admin else None,
        secret=Secret(secret) if secret else None,
        source=source,
    )


def _plain(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _route(model: RouteModel, index: int) -> Route:
    where = f"routes[{index}]"
    tags = _tag_set(model, where)
    dialect, source = route_dialect(model.dialect, model.upstream)
    return Route(
        name=model.name,
        models=tuple(model.models),
        upstream=model.upstream,
        api_key=Secret(key) if (key := _plain(model.api_key)) else None,
        dialect=dialect,
        dialect_source=source,
        reasoning=config_overrides(model.reasoning, f"{where}.reasoning"),
        context_limit=model.context_limit,
        compression_threshold=model.compression_threshold,
        implicit_open_tag=model.implicit_open_tag,
        tags=tags,
        connect_timeout=model.timeouts.connect,
        idle_timeout=model.timeouts.idle,
        headers=tuple(model.headers.items()),
        upstream_proxy=ProxyURL.parse(model.upstream_proxy) if model.upstream_proxy else None,
        api=model.api,
        shared_objects=model.shared_objects,
    )


def _tag_set(model: RouteModel, where: str) -> TagSet:
    names = [t for t in model.tags if isinstance(t, str)]
    pairs = [(t.open, t.close) for t in model.tags if isinstance(t, TagPairModel)]
    presets = [t.preset for t in model.tags if isinstance(t, TagPresetModel)]
    if model.implicit_open_tag and not model.tags:
        raise ValueError(f"{where}.implicit_open_tag needs a close tag, but tags is empty")
    try:
        return TagSet.of(
            names,
            pairs=pairs,
            presets=presets,
            answer_tags=model.answer_tags,
            tool_call_markers=model.tool_call_markers,
            only_at_start=model.tags_only_at_start,
        )
    except ValueError as exc:
        raise ValueError(f"{where}.tags: {exc}") from None


def route_dialect(name: str, upstream: str) -> tuple[Dialect, DialectSource]:
    """A route's dialect and where it came from: the config's name, else the
    upstream host's dialect, else openai until the model name says more."""
    if name != "auto":
        return DIALECTS[name], "config"
    found = host_dialect(urlsplit(upstream).hostname or "")
    if found is not None:
        return found, "host"
    return DIALECTS[DEFAULT_DIALECT], "model"


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML
    itself keeps the last, so a second `server:` or `upstream:` would
    silently replace the first). A key from a `<<:` merge may be given
    again: that is what merging is for."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the constructor below says so
            continue
        if repeated:
            raise yaml.MarkedYAMLError(
                problem=f"the key {key!r} is given twice (YAML would keep only the last)",
                problem_mark=key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def _yaml_error(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where, then what."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        said = where + exc.problem
        if exc.context and exc.context_mark and exc.context_mark is not mark:
            at = exc.context_mark
            said += f" ({exc.context} at line {at.line + 1}, column {at.column + 1})"
        return said
    return " ".join(str(exc).split())


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise ConfigError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at line {line}, column {column} "
            "(save the file as UTF-8)"
        ) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_error(exc)}") from None
    return build_config(data, env=env, source=str(path))


class _Reads(Mapping[str, str]):
    """An environment that remembers the names looked up in it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.names: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        return self._env[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def env_flag(name: str, value: str) -> bool:
    """A true/false environment variable's value; a ConfigError naming the
    variable for any other spelling (never silently false)."""
    spelled = value.strip().lower()
    if spelled in FLAG_TRUE:
        return True
    if spelled in FLAG_FALSE:
        return False
    raise ConfigError(
        f"{name}={value}: not true or false (1, true, yes or on; 0, false, no, off or empty)"
    )


def _upstream_route_variable(name: str, value: str) -> str | None:
    """The route key a variable of the `--upstream` route stands for, when
    its value would change that route (None: not such a variable, or a
    value that changes nothing)."""
    if name == ENV_DIALECT and value not in ("", "auto"):
        return "dialect"
    if name == ENV_IMPLICIT_OPEN_TAG and env_flag(name, value):
        return "implicit_open_tag"
    return None


def load_serve_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """`load_config` for `serve --config` (and `check-config`): a variable
    that sets the `--upstream` route (REASONING_PROXY_DIALECT,
    REASONING_PROXY_IMPLICIT_OPEN_TAG) is refused beside a file, as
    `--dialect` is, since the file's routes would silently not follow it;
    unless the file reads it itself (`dialect: ${REASONING_PROXY_DIALECT}`)."""
    env = os.environ if env is None else env
    reads = _Reads(env)
    config = load_config(path, reads)
    for name, value in env.items():
        if name in reads.names:
            continue  # the file's own value, checked as the file's
        key = _upstream_route_variable(name, value)
        if key is not None:
            raise ConfigError(
                f"{name} sets the --upstream route's {key}, and {path} has its own routes: "
                f"unset it, or write {key}: ${{{name}}} on the routes it is meant for"
            )
    return config


def upstream_config(
    upstream: str,
    env: Mapping[str, str] | None = None,
    dialect: str | None = None,
    implicit_open_tag: bool = False,
) -> Config:
    """`--upstream URL` alone: one catch-all route whose dialect is detected
    (host, then model name per request) unless `dialect` (or the
    environment's REASONING_PROXY_DIALECT) names one; `implicit_open_tag`
    (or REASONING_PROXY_IMPLICIT_OPEN_TAG=1): the prompt template opens
    `<think>`, so replies start inside the reasoning."""
    env = os.environ if env is None else env
    source = "--upstream"
    if not dialect and env.get(ENV_DIALECT):
        dialect = env[ENV_DIALECT]
        source = f"--upstream with {ENV_DIALECT}={dialect}"  # errors name the variable
    route: dict[str, Any] = {"name": "default", "models": ["*"], "upstream": upstream}
    if dialect:
        route["dialect"] = dialect
    if implicit_open_tag or env_flag(ENV_IMPLICIT_OPEN_TAG, env.get(ENV_IMPLICIT_OPEN_TAG, "")):
        route["implicit_open_tag"] = True
    return build_config({"routes": [route]}, env=env, source=source)


def with_overrides(config: Config, **server: Any) -> Config:
    """The config with server/store options from the command line applied."""
    from dataclasses import replace

    store_url = server.pop("store_url", None)
    changes = {k: v for k, v in server.items() if v is not None}
    try:
        # validated as the file's values are (model_copy alone checks nothing)
        checked = ServerModel.model_validate({**config.server.model_dump(), **changes})
    except ValidationError as exc:
        flags = "; ".join(
            f"--{str(err['loc'][0]).replace('_', '-')}: {_message(err)}" for err in exc.errors()
        )
        raise ConfigError(flags) from None
    new = replace(config, server=checked)
    if store_url:
        new = replace(new, store=config.store.model_copy(update={"url": store_url}))
    return new


def describe(config: Config) -> dict[str, Any]:
    """The resolved config as plain data, secrets shown as set/unset only."""

    def secret(value: Secret | None) -> str | None:
        return "<set>" if value is not None else None

    # unset, the tenant secret is the one a durable store keeps (runtime.py)
    in_memory = urlsplit(config.store.url).scheme.lower() in ("", "memory")
    tenant_secret = secret(config.secret) or (
        "<unset: random per start>" if in_memory else "<unset: kept in the store>"
    )
    return {
        "source": config.source,
        "server": {
            **config.server.model_dump(exclude={"admin_token", "secret"}),
            "admin_token": secret(config.admin_token),
            "secret": tenant_secret,
        },
        "store": {**config.store.model_dump(), "url": shown_store_url(config.store.url)},
        "limits": config.limits.model_dump(),
        "ui": config.ui.model_dump(),
        "defaults": dict(config.defaults),
        "profiles": {k: dict(v) for k, v in config.profiles.items()},
        "routes": [
            {
                "name": r.name,
                "models": list(r.models),
                "upstream": r.upstream,
                "api_key": secret(r.api_key) or "<forward the client's Authorization>",
                "dialect": r.dialect.name if r.dialect_source != "model" else "auto",
                "dialect_detection": dialect_detection(r),
                "reasoning": dict(r.reasoning),
                "context_limit": r.context_limit,
                "compression_threshold": r.compression_threshold,
                "implicit_open_tag": r.implicit_open_tag,
                "tags": r.tags.describe(),
                "tags_only_at_start": r.tags.only_at_start,
                "answer_tags": list(r.tags.answer_tags),
                "tool_call_markers": list(r.tags.tool_call_markers),
                "timeouts": {"connect": r.connect_timeout, "idle": r.idle_timeout},
                "headers": {k: "<set>" for k, _ in r.headers},
                "upstream_proxy": str(r.upstream_proxy) if r.upstream_proxy else None,
                "api": r.api,
            }
            for r in config.routes
        ],
    }


def shown_store_url(url: str) -> str:
    """The store URL with its password shown as set only: the userinfo's
    (`redis://user:<set>@host`) and redis-py's `password` query option."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an invalid URL>"
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    netloc = f"{user}{colon}{'<set>' if password else ''}{at}{hosts}"
    query = "&".join(
        f"{name}=<set>" if name.lower() == "password" else f"{name}{eq}{value}"
        for name, eq, value in (item.partition("=") for item in parts.query.split("&"))
    )
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # as written (urlunsplit would drop the `//` of sqlite:///)
    return f"{parts.scheme}://{netloc}{parts.path}{'?' if query else ''}{query}"


def dialect_detection(route: Route) -> str:
    """How a route's dialect is decided, for check-config."""
    if route.dialect_source == "config":
        said = f"set in the config ({route.dialect.name})"
    elif route.dialect_source == "host":
        host = urlsplit(route.upstream).hostname
        said = f"from the upstream host {host} ({route.dialect.name})"
    else:
        makers = "; ".join(f"/{regex}/ -> {name}" for regex, name in MAKERS)
        return "per request from the model name (" + makers + "), else " + DEFAULT_DIALECT
    if route.dialect.multi_vendor:
        said += "; tool-call turns also get reasoning back where the model's maker needs it"
    return said
