"""The planner: a request becomes one `Exchange` value before anything goes upstream.

In: the request's headers and body, the route table, the profiles, the
stored history. Out: an `Exchange` holding everything decided about it: the
route, the effective reasoning settings, the tenant's conversation key, the
upstream body and headers, the context accounting and the headers the
client gets back. Everything that can be refused is refused here, as a
ProxyError, before a byte goes upstream. The front doors (chat completions,
pass-through, and the doors that translate other APIs) drive an Exchange;
none of them looks up history, profiles or credentials itself.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson

from proxy.config import CREDENTIAL_HEADERS, Route, Secret
from proxy.dialects import (
    DEFAULT_DIALECT,
    DIALECTS,
    REMEMBERED_NAME,
    Dialect,
    ParamPlan,
    apply_params,
    dialect_for,
    plan_params,
)
from proxy.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    Unauthorized,
    UnknownProfile,
    require_type,
)
from proxy.history.context import EgressPlan
from proxy.history.explain import turn_input
from proxy.history.keys import ConversationKey, credential
from proxy.live import TurnWatcher
from proxy.reasoning.blocks import Turn
from proxy.runtime import Runtime
from proxy.settings import (
    PROFILE_HEADER,
    ReasoningSettings,
    config_overrides,
    header_overrides,
    request_conversation_id,
    request_profile,
    resolve,
)
from proxy.tokenizer import LONG_TEXT
from proxy.upstream import hop_by_hop

# a request's dialect, settings, body parameters and unhonoured settings
Decided = tuple[Dialect, ReasoningSettings, ParamPlan, tuple[str, ...]]

# request headers that are the proxy's own and never go upstream
OWN_HEADERS = ("x-reasoning-", "x-conversation-id")
# request headers that describe the client's body: where the proxy writes the
# body it sends (a front door, which read it decoded), they are its own
BODY_HEADERS = frozenset(("content-type", "content-encoding"))

# What the planner remembers per model name (route, dialect, settings): at
# most REMEMBERED entries, and only for names of at most REMEMBERED_NAME
# characters; a longer name (the body's to choose) is decided afresh each
# time, so the memory stays bounded whatever clients send.
REMEMBERED = 4096


@dataclass(slots=True, init=False)
class Exchange:
    """Everything decided about one request before it goes upstream, and
    what became of it (the turn, once stored)."""

    route: Route
    settings: ReasoningSettings
    key: ConversationKey
    payload: dict[str, Any]
    plan: EgressPlan
    stream: bool
    upstream_headers: list[tuple[str, str]]
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    turn: Turn | None = None
    stored: bool = False
    watcher: TurnWatcher | None = None  # set while someone watches the live feed
    # the dialect this request got (route, host or model name; see dialect_for)
    dialect: Dialect = DIALECTS[DEFAULT_DIALECT]
    # what the request added after its latest assistant message, kept with
    # the turn (ui.show_prompts): read from the chat messages it was planned
    # from, since a native route's door then sends its own body upstream
    request_input: list[dict[str, Any]] | None = None

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        route: Route,
        settings: ReasoningSettings,
        key: ConversationKey,
        payload: dict[str, Any],
        plan: EgressPlan,
        stream: bool,
        upstream_headers: list[tuple[str, str]],
        extra_headers: list[tuple[str, str]] | None = None,
        turn: Turn | None = None,
        stored: bool = False,
        watcher: TurnWatcher | None = None,
        dialect: Dialect = DIALECTS[DEFAULT_DIALECT],
        request_input: list[dict[str, Any]] | None = None,
    ) -> None:
        self.route = route
        self.settings = settings
        self.key = key
        self.payload = payload
        self.plan = plan
        self.stream = stream
        self.upstream_headers = upstream_headers
        self.extra_headers = [] if extra_headers is None else extra_headers
        self.turn = turn
        self.stored = stored
        self.watcher = watcher
        self.dialect = dialect
        self.request_input = request_input

    @property
    def context(self) -> dict[str, int]:
        return {"effective": self.plan.effective, "raw": self.plan.raw}

    def name_output_limit(self) -> None:
        """For a door that wrote the client's output limit as `max_tokens`
        itself: under the key the dialect's model takes. (A chat client's
        own body goes as it wrote it.)"""
        model = self.payload.get("model")
        if "max_tokens" in self.payload and isinstance(model, str):
            key = self.dialect.output_limit(model)
            if key != "max_tokens":
                self.payload[key] = self.payload.pop("max_tokens")


class Planner:
    """Turns requests into Exchanges for one runtime (routes by model name
    are remembered: the globs are matched once per name)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._routes: dict[str | None, Route | None] = {}
        # (route, model, config profile, header settings) -> what they decide;
        # the same few combinations come back request after request
        self._decided: dict[tuple[Any, ...], tuple[Route, Decided]] = {}

    def authorize(self, headers: list[tuple[str, str]]) -> str | None:
        """The client's credential, which names its tenant (`client_authorization`);
        401 when the proxy requires a key and none is given."""
        return client_authorization(headers, self.rt.config.server.require_auth)

    def route(self, model: str | None) -> Route:
        try:
            route = self._routes[model]
        except KeyError:
            route = self.rt.config.route_for(model)
            if len(self._routes) < REMEMBERED and (model is None or len(model) <= REMEMBERED_NAME):
                self._routes[model] = route
        if route is None:
            raise NotFound(
                "No route of this proxy serves that model.", param="model", code="model_not_found"
            )
        return route

    async def chat(
        self,
        headers: list[tuple[str, str]],
        body: Callable[[], Awaitable[bytes]],
        *,
        counting: bool = False,
    ) -> Exchange:
        """A chat completions request as an Exchange. The headers are checked
        before the body is read (`body()`), so a bad setting costs no upload.
        `counting`: planned for its token count only; it is not sent."""
        rt = self.rt
        authorization = self.authorize(headers)
        from_headers = header_overrides(headers)
        conversation = request_conversation_id(headers)
        profile_name = request_profile(headers)
        profile = await self._profile(profile_name)
        raw = await body()
        payload = parse_json_object(raw)
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(
                "messages must be a non-empty array.", param="messages", code="invalid_messages"
            )
        require_type(payload, "model", str)
        require_type(payload, "stream", bool)  # null is the default
        model: str | None = payload.get("model")
        route = self.route(model)
        dialect, settings, params, ignored = self._decide(
            route, model, profile_name, profile, from_headers
        )
        tenant = rt.tenant(authorization)
        key = ConversationKey(
            tenant, conversation or await rt.history.conversation_for(tenant, messages, route)
        )
        plan = await rt.history.plan(
            key,
            scoped=conversation is not None,
            messages=messages,
            tools=payload.get("tools"),
            route=route,
            dialect=dialect,
            settings=settings,
            large=len(raw) >= LONG_TEXT,  # (no text is longer than the body)
            counting=counting,
        )
        payload["messages"] = plan.result.messages
        apply_params(payload, params.params, frozenset(from_headers), params.alike)
        extra = [
            ("x-context-tokens-effective", str(plan.effective)),
            ("x-context-tokens-raw", str(plan.raw)),
            ("x-conversation-id", key.conversation),
            ("x-reasoning-dialect", dialect.name),
        ]
        if ignored:
            extra.append(("x-reasoning-ignored", ", ".join(ignored)))
        if route.context_limit:
            extra.append(("x-context-limit", str(route.context_limit)))
        if plan.compressed:
            extra.append(("x-reasoning-compressed", plan.compressed))
        return Exchange(
            route=route,
            settings=settings,
            key=key,
            payload=payload,
            plan=plan,
            stream=payload.get("stream") is True,
            upstream_headers=upstream_headers(
                headers, route, json=True, admin=rt.config.admin_token
            ),
            extra_headers=extra,
            dialect=dialect,
            request_input=turn_input(messages)
            if rt.config.ui.show_prompts and not counting
            else None,
        )

    def _decide(
        self,
        route: Route,
        model: str | None,
        profile_name: str | None,
        profile: dict[str, Any] | None,
        from_headers: dict[str, Any],
    ) -> Decided:
        """The dialect, settings and body parameters of a request, and the
        settings the upstream cannot honour. A profile from the store may
        change at any time, so only config profiles are remembered."""
        key: tuple[Any, ...] | None = None
        if (profile_name is None or profile_name in self.rt.config.profiles) and (
            model is None or len(model) <= REMEMBERED_NAME
        ):
            try:
                key = (route.name, model, profile_name, tuple(from_headers.items()))
                known = self._decided.get(key)
            except TypeError:  # a setting's value that cannot be a key
                key = known = None
            if known is not None and known[0] is route:
                return known[1]
        dialect = dialect_for(route.dialect, route.dialect_source, model)
        settings = resolve(self.rt.config.defaults, route.reasoning, profile, from_headers)
        params = plan_params(dialect, settings, model or "")
        ignored = ignored_settings(dialect, settings, params.ignored)
        decided = (dialect, settings, params, ignored)
        if key is not None and len(self._decided) < REMEMBERED:
            self._decided[key] = (route, decided)
        return decided

    async def _profile(self, name: str | None) -> dict[str, Any] | None:
        if name is None:
            return None
        profiles = self.rt.config.profiles
        if name in profiles:
            return dict(profiles[name])
        # a store that does not answer is a 503: its profile may well exist
        with self.rt.health.errors("profile"):
            stored = await self.rt.store.get_profile(name)
        if stored is None:
            raise UnknownProfile(
                f"{PROFILE_HEADER} names no profile of this proxy.", param=PROFILE_HEADER
            )
        try:
            return config_overrides(stored, "profile")
        except ValueError:
            # stored by a version that took null for any setting: null was unset
            return config_overrides({k: v for k, v in stored.items() if v is not None}, "profile")


def ignored_settings(
    dialect: Dialect, settings: ReasoningSettings, unsent: tuple[str, ...]
) -> tuple[str, ...]:
    """The settings this upstream cannot honour: request parameters it has no
    place for, and reasoning asked back (`true`) where it may never go."""
    if settings.include_in_context is True and dialect.never_send:
        return (*unsent, "include_in_context")
    return unsent


def client_authorization(headers: Sequence[tuple[str, str]], required: bool) -> str | None:
    """The client's credential as an Authorization value: its `Authorization`,
    else its `x-api-key` as a bearer token, so one key is one tenant whichever
    header carries it. `required` (`server.require_auth`): a request without
    a key, or with an empty one, is a 401."""
    authorization = next((v for k, v in headers if k == "authorization"), None)
    if not authorization:
        key = next((v for k, v in headers if k == "x-api-key"), None)
        authorization = f"Bearer {key}" if key else authorization
    if required and credential(authorization) is None:
        raise Unauthorized(
            "This proxy requires an API key (Authorization: Bearer ..., or x-api-key)."
        )
    return authorization


ADMIN_NOT_FORWARDED = (
    "The admin token is this proxy's own secret and is never sent upstream: "
    "send the upstream's key, or give the route its own api_key."
)


# what separates a credential from the text around it in a header or query
# value: a list's commas, the space after a scheme, an auth-param's `=` and
# quotes (`Token token="<key>"`), a cookie's `;`, a Basic pair's `:`
CREDENTIAL_SEPARATORS = " \t\v\f\xa0,;:=\"'"
# a value is read as written and percent-decoded up to this many times (an
# upstream decodes a cookie or a query parameter, some more than once)
TOKEN_DECODINGS = 3


def credential_forms(value: str, token: str) -> list[str]:
    """What an upstream may take for a credential in a header or query
    value: each word of it (split at `CREDENTIAL_SEPARATORS`, but for those
    `token` holds itself), as written and percent-decoded, and the words of
    a word that decodes as base64 (both halves of a `Basic` user:password)."""
    pattern = _word_separators(token)
    texts = [value]
    for _ in range(TOKEN_DECODINGS):
        decoded = unquote(texts[-1])
        if decoded == texts[-1]:
            break
        texts.append(decoded)
    forms = []
    for text in texts:
        for word in pattern.split(text):
            forms.append(word)
            pair = _base64_text(word) if len(word) > len(token) else None
            if pair is not None:
                forms.extend(pattern.split(pair))
    return forms


@functools.lru_cache(maxsize=8)
def _word_separators(token: str) -> re.Pattern[str]:
    """The separators of `credential_forms` that `token` does not hold itself."""
    separators = "".join(c for c in CREDENTIAL_SEPARATORS if c not in token)
    return re.compile(f"[{re.escape(separators)}]+" if separators else "(?!)")


def _base64_text(word: str) -> str | None:
    """The text `word` is the base64 (standard or URL-safe, padded or not) of, or None."""
    if len(word) < 4:
        return None
    padded = word + "=" * (-len(word) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return None


def holds_token(value: str, token: str) -> bool:
    """A header or query value carries `token` itself as one of its
    `credential_forms`, not merely inside a longer key. Compared in
    constant time."""
    if not token or len(value) < len(token):
        # every form is at most as long as the value (decoding only shortens)
        return False
    secret = token.encode()
    forms = [form.encode() for form in credential_forms(value, token)]
    # every form compared, so the time does not say which one matched
    return sum(hmac.compare_digest(form, secret) for form in forms) > 0


def refuse_admin_token(headers: Iterable[tuple[str, str]], admin: Secret | None) -> None:
    """A 403 when any of the headers about to go upstream, whatever its
    name, carries the `admin` token (`holds_token`): an upstream may read
    any header as a credential (`Ocp-Apim-Subscription-Key`, `X-Auth-Token`)."""
    if admin is None:
        return
    token = admin.get()
    if any(holds_token(value, token) for _, value in headers):
        raise Forbidden(ADMIN_NOT_FORWARDED, code="admin_token_not_forwarded")


def upstream_headers(
    headers: list[tuple[str, str]], route: Route, *, json: bool, admin: Secret | None = None
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones and the proxy's own, its
    credential as it came; when the route has its own key (`api_key`, or a
    credential in its `headers:`), that key alone (none of the client's
    credential headers go), and the route's own headers are added, each in
    place of the client's header of that name. `json`:
    the proxy writes the body (its content type is JSON whatever the client
    said, with no Content-Encoding: `BODY_HEADERS`). A client header that
    carries the `admin` token (`refuse_admin_token`) is refused (403) where
    it would go upstream."""
    keyed = route.keyed
    drop = hop_by_hop(headers)
    # one pass: the client's own content type and encoding go too where the
    # proxy writes the body (they are no credentials: the check below sees the same)
    out = [
        (k, v)
        for k, v in headers
        if k.lower() not in drop
        and not k.startswith(OWN_HEADERS)
        and not (keyed and k in CREDENTIAL_HEADERS)
        and k not in route.header_names
        and not (json and k in BODY_HEADERS)
    ]
    refuse_admin_token(out, admin)
    if json:
        out.append(("content-type", "application/json"))
    if route.api_key is not None:
        if route.api == "messages":  # Anthropic's API takes its key as x-api-key
            out.append(("x-api-key", route.api_key.get()))
        else:
            out.append(("authorization", f"Bearer {route.api_key.get()}"))
    out.extend(route.headers)
    return out


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (RFC 8259: no byte-order mark, NaN, or
    number beyond a double; nested at most 1,024 deep). A 400 says why and
    where, in the parser's own fixed words: never a piece of the body."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise BadRequest(
                "The request body is not valid JSON: it is not UTF-8 (an invalid byte "
                f"at offset {bad.start}), and JSON is, whatever charset the Content-Type names.",
                code="invalid_json",
            ) from None
        raise BadRequest(
            f"The request body is not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno}).",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.", code="invalid_json")
    return data
