"""Reasoning settings: defaults, the X-Reasoning-* headers, and precedence.

Settings come, lowest to highest, from the built-in defaults, the route's
config, a profile, and the request's headers. Each layer is an `Overrides`
mapping of only the fields it sets; `resolve` applies them in order. The
header table below is the single description of names, values and defaults:
the parser, the config validation and the README table all read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from proxy.errors import InvalidConversationId, InvalidSetting
from proxy.reasoning.blocks import StripPolicy
from proxy.reasoning.output import OUTPUTS, Output

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
# auto: the dialect decides (reasoning back on tool-call turns where the
# upstream needs it there, nothing elsewhere)
IncludeInContext = bool | Literal["auto"]
Format = Literal["field", "native"]
Overrides = Mapping[str, Any]
MAX_INT = 999_999_999  # the largest token count a setting takes (nine digits)


@dataclass(frozen=True, slots=True)
class ReasoningSettings:
    enabled: bool = True
    include_in_context: IncludeInContext = "auto"
    include_in_response: bool = True
    effort: Effort | None = None
    max_tokens: int | None = None
    format: Format = "field"
    strip_from_context: StripPolicy = "none"
    output: Output = "reasoning_content"  # the shape the client gets reasoning in

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULTS = ReasoningSettings()


@dataclass(frozen=True, slots=True)
class Setting:
    """One reasoning setting: its header, config key, camelCase alias and values."""

    field: str
    header: str
    alias: str
    kind: Literal["bool", "auto_bool", "choice", "positive_int"]
    choices: tuple[str, ...] = ()
    # the setting has an unset state (its default is None), which `null` in
    # a config file or a profile selects; the others have none, so null there
    # is an error, not a value
    nullable: bool = False

    @property
    def allowed(self) -> str:
        if self.kind == "bool":
            return "true, false"
        if self.kind == "auto_bool":
            return "auto, true, false"
        if self.kind == "positive_int":
            return f"a positive integer up to {MAX_INT:,}"
        return ", ".join(self.choices)

    def parse(self, raw: object) -> Any:
        """The canonical value, or ValueError naming what is allowed."""
        if self.kind in ("bool", "auto_bool"):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "false"):
                return text == "true"
            if text == "auto" and self.kind == "auto_bool":
                return "auto"
        elif self.kind == "positive_int":
            if isinstance(raw, bool):
                raise ValueError(self.allowed)
            text = str(raw).strip()
            if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) > 0:
                return int(text)
        else:
            text = str(raw).strip().lower()
            for choice in self.choices:
                if choice.lower() == text:
                    return choice
        raise ValueError(self.allowed)


SETTINGS: tuple[Setting, ...] = (
    Setting("enabled", "X-Reasoning-Enabled", "enabled", "bool"),
    Setting(
        "include_in_context", "X-Reasoning-Include-In-Context", "includeInContext", "auto_bool"
    ),
    Setting("include_in_response", "X-Reasoning-Include-In-Response", "includeInResponse", "bool"),
    Setting(
        "effort",
        "X-Reasoning-Effort",
        "effort",
        "choice",
        ("none", "minimal", "low", "medium", "high", "xhigh"),
        nullable=True,
    ),
    Setting("max_tokens", "X-Reasoning-Max-Tokens", "maxTokens", "positive_int", nullable=True),
    Setting("format", "X-Reasoning-Format", "format", "choice", ("field", "native")),
    Setting(
        "strip_from_context",
        "X-Reasoning-Strip-From-Context",
        "stripFromContext",
        "choice",
        ("all", "allButLast", "none"),
    ),
    Setting("output", "X-Reasoning-Output", "output", "choice", OUTPUTS),
)
PROFILE_HEADER = "X-Reasoning-Profile"
CONVERSATION_HEADER = "X-Conversation-Id"
_BY_HEADER = {s.header.lower(): s for s in SETTINGS}
# the proxy's own request headers: lower-case name -> the name as documented
OWN_HEADER_NAMES = {
    name.lower(): name
    for name in (*(s.header for s in SETTINGS), PROFILE_HEADER, CONVERSATION_HEADER)
}
_BY_KEY = {**{s.field: s for s in SETTINGS}, **{s.alias: s for s in SETTINGS}}

_CONVERSATION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def header_overrides(headers: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Settings from X-Reasoning-* request headers (lower-case names).

    A header given twice with different values is as invalid as a bad value.
    Errors name the header and the allowed values, never the value sent."""
    out: dict[str, Any] = {}
    for name, raw in headers:
        setting = _BY_HEADER.get(name)
        if setting is None:
            continue
        try:
            value = setting.parse(raw)
        except ValueError:
            raise InvalidSetting(
                f"{setting.header} must be {_must_be(setting)}", param=setting.header
            ) from None
        if setting.field in out and out[setting.field] != value:
            raise InvalidSetting(
                f"{setting.header} was given twice with different values", param=setting.header
            )
        out[setting.field] = value
    return out


def _must_be(setting: Setting) -> str:
    if setting.kind == "positive_int":
        return setting.allowed
    return "one of: " + setting.allowed


class InvalidSettingValue(ValueError):
    """A bad value in a config mapping (`param`: the key as it was written),
    or a setting given twice, by its name and its alias (`param`: its name)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def config_overrides(mapping: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Settings from a config mapping (snake_case keys, camelCase aliases).
    Raises ValueError naming the key for unknown keys and bad values. `null`
    unsets a setting that has an unset state (effort, max_tokens) and is a
    bad value for every other one."""
    out: dict[str, Any] = {}
    for key, raw in mapping.items():
        setting = _BY_KEY.get(key)
        if setting is None:
            known = ", ".join(s.field for s in SETTINGS)
            raise ValueError(f"{where}: unknown reasoning setting {key!r} (known: {known})")
        if setting.field in out:
            raise InvalidSettingValue(
                f"{where}: {setting.field} is given twice (as {setting.field} and "
                f"{setting.alias}): give it once",
                param=setting.field,
            )
        if raw is None:
            if not setting.nullable:
                raise InvalidSettingValue(
                    f"{where}.{key} cannot be null (leave it out to not set it); "
                    f"it must be {_must_be(setting)}",
                    param=key,
                )
            out[setting.field] = None
            continue
        try:
            out[setting.field] = setting.parse(raw)
        except ValueError:
            raise InvalidSettingValue(f"{where}.{key} must be {_must_be(setting)}", key) from None
    return out


def resolve(*layers: Overrides | None, base: ReasoningSettings = DEFAULTS) -> ReasoningSettings:
    """Apply override layers in order, lowest precedence first."""
    settings = base
    for layer in layers:
        if layer:
            settings = replace(settings, **layer)
    return settings


def _one_value(
    headers: Iterable[tuple[str, str]],
    name: str,
    error: type[InvalidSetting | InvalidConversationId],
) -> str | None:
    """The value of header `name` (given in canonical case; names in `headers`
    are lower case). Twice with different values is refused (taking either
    could act on what the client did not mean); repeats of one value are fine.
    Errors never echo values."""
    lowered = name.lower()
    found: str | None = None
    for key, value in headers:
        if key == lowered:
            if found is not None and value != found:
                raise error(f"{name} was given twice with different values", param=name)
            found = value
    return found


def request_conversation_id(headers: Iterable[tuple[str, str]]) -> str | None:
    """The request's X-Conversation-Id, checked."""
    return parse_conversation_id(_one_value(headers, CONVERSATION_HEADER, InvalidConversationId))


def request_profile(headers: Iterable[tuple[str, str]]) -> str | None:
    """The request's X-Reasoning-Profile name."""
    return _one_value(headers, PROFILE_HEADER, InvalidSetting)


def parse_conversation_id(raw: str | None, name: str = CONVERSATION_HEADER) -> str | None:
    """`raw` when it is a valid conversation id; `name` says where it came
    from (the header, or the `id` of a conversations API path)."""
    if raw is None:
        return None
    if not _CONVERSATION_ID.fullmatch(raw):
        raise InvalidConversationId(
            f"{name} must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':', '-'",
            param=name,
        )
    return raw
