"""``HANGO_TEMPORAL_*``: where the Temporal server is and which task queue hango uses."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from hango.middleware import ConfigError, float_setting

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_HEARTBEAT_SECONDS = 10.0


@frozen
class TemporalSettings:
    """``address``: the server's frontend, host:port (``HANGO_TEMPORAL_ADDRESS``, default
    ``127.0.0.1:7233``); ``namespace`` (``HANGO_TEMPORAL_NAMESPACE``, default ``default``);
    ``task_queue`` runs are started on (``HANGO_TEMPORAL_TASK_QUEUE``, default ``hango``);
    ``heartbeat_seconds``: how long a step's worker may go silent before the step is retried
    on another worker (``HANGO_TEMPORAL_HEARTBEAT_SECONDS``, default 10)."""

    address: str = DEFAULT_ADDRESS
    namespace: str = "default"
    task_queue: str = "hango"
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> TemporalSettings:
        """Raises ``ConfigError`` naming the variable that is empty or malformed."""
        values: dict[str, str] = {}
        for key, name in (
            ("address", "HANGO_TEMPORAL_ADDRESS"),
            ("namespace", "HANGO_TEMPORAL_NAMESPACE"),
            ("task_queue", "HANGO_TEMPORAL_TASK_QUEUE"),
        ):
            raw = settings.get(name)
            if raw is None:
                continue
            if not raw.strip():
                raise ConfigError(f"{name} is empty; unset it or give a value")
            values[key] = raw.strip()
        address = values.get("address", DEFAULT_ADDRESS)
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"HANGO_TEMPORAL_ADDRESS must be host:port, got {address!r}")
        heartbeat = float_setting(
            settings, "HANGO_TEMPORAL_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS, minimum=0.5
        )
        return cls(heartbeat_seconds=heartbeat, **values)
