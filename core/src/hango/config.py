"""Settings: ``HANGO_*`` environment variables, their parsers, and ``StackConfig``, what a plugin
builds its middleware from."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def int_setting(settings: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    """``settings[name]`` as an int >= ``minimum``; ``ConfigError`` naming ``name`` otherwise."""
    raw = settings.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


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
