"""Settings: ``HANGO_*`` environment variables, their parsers, and ``StackConfig``, what a plugin
builds its middleware from."""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from attrs import field, frozen

#: The tenant used when ``HANGO_TENANT`` is not set.
DEFAULT_TENANT = uuid.UUID("00000000-0000-0000-0000-000000000000")


class HangoWarning(UserWarning):
    """Something a user should fix that does not stop a run; the ``hango`` command prints it as
    one ``warning:`` line."""


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable (or agent-file field)."""


def hango_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``HANGO_*`` variables of ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k.startswith("HANGO_")}


_D = TypeVar("_D")
_N = TypeVar("_N", int, float)


def _setting(
    settings: Mapping[str, str],
    name: str,
    default: _D,
    convert: Callable[[str], _N],
    kind: str,
    accept: Callable[[_N], bool],
    bound: str,
    *,
    show_value: bool = False,
) -> _N | _D:
    # The one parser behind int_setting, float_setting and duration_setting: unset or empty
    # is the default; anything else converts and passes ``accept``, or is a ConfigError that
    # names the variable and quotes what it held.
    raw = settings.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = convert(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None
    if not accept(value):
        raise ConfigError(f"{name} must be {bound}, got {value if show_value else repr(raw)}")
    return value


def int_setting(settings: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    """``settings[name]`` as an int >= ``minimum`` (``default`` when unset or empty);
    ``ConfigError`` naming ``name`` otherwise."""
    return _setting(
        settings,
        name,
        default,
        int,
        "an integer",
        lambda v: v >= minimum,
        f"at least {minimum}",
        show_value=True,
    )


def float_setting(
    settings: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0
) -> float:
    """``settings[name]`` as a finite float >= ``minimum`` (``default`` when unset or empty);
    ``ConfigError`` naming ``name`` otherwise (NaN and infinity included)."""
    return _setting(
        settings,
        name,
        default,
        float,
        "a number",
        lambda v: minimum <= v < math.inf,
        f"a number of at least {minimum}",
    )


def duration_setting(
    settings: Mapping[str, str], name: str, default: _D, *, positive: bool = False
) -> float | _D:
    """``settings[name]`` as a number of seconds (a float; ``default`` when unset or empty):
    0 or more, or more than 0 when ``positive``, and finite. ``ConfigError`` naming ``name``
    otherwise."""
    accept: Callable[[float], bool] = (
        (lambda v: 0 < v < math.inf) if positive else (lambda v: 0 <= v < math.inf)
    )
    bound = "a positive number of seconds" if positive else "0 or more seconds"
    return _setting(settings, name, default, float, "a number of seconds", accept, bound)


@frozen
class Config:
    """Process-wide settings: ``database_url`` (HANGO_DATABASE_URL, default a SQLite file
    ``.hango/hango.db``) and ``tenant_id`` (HANGO_TENANT, a UUID)."""

    database_url: str
    tenant_id: uuid.UUID

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        settings = hango_settings(env)
        url = settings.get("HANGO_DATABASE_URL") or f"sqlite:///{Path('.hango') / 'hango.db'}"
        raw_tenant = settings.get("HANGO_TENANT")
        try:
            tenant = uuid.UUID(raw_tenant) if raw_tenant else DEFAULT_TENANT
        except ValueError:
            raise ConfigError(f"HANGO_TENANT must be a UUID, got {raw_tenant!r}") from None
        return cls(url, tenant)


@frozen
class StackConfig:
    """What plugins build their middleware from.

    ``tool_allowlist``: the agent's effective allowlist (None = every tool). ``settings``: the
    ``HANGO_*`` settings (name -> raw string), deployment-wide defaults. ``agent_middleware``:
    the names of the agent file's ``middleware`` list, in order. ``middleware_options``: the
    agent file's ``[options.<name>]`` tables, already validated against each plugin's schema;
    read one with ``options(name)``. ``source`` names the agent in error messages.
    ``base_dir`` is the agent file's folder, which relative paths in options (a
    ``scripted:PATH`` model spec) resolve against; None resolves them against the working
    directory.
    """

    tool_allowlist: frozenset[str] | None = None
    settings: Mapping[str, str] = field(factory=dict)
    agent_middleware: tuple[str, ...] = ()
    middleware_options: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    source: str = field(default="agent", eq=False)
    base_dir: str | None = None

    def options(self, name: str) -> Mapping[str, Any]:
        """Middleware ``name``'s ``[options.<name>]`` table from the agent file (``{}`` when
        absent). A setting given here wins over the ``HANGO_*`` default."""
        return self.middleware_options.get(name, {})
