"""``HANGO_TEMPORAL_*``: where the Temporal server is and which task queue hango uses."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from hango.middleware import ConfigError, duration_setting, float_setting

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_HEARTBEAT_SECONDS = 10.0


@frozen
class TemporalSettings:
    """``address``: the server's frontend, host:port (``HANGO_TEMPORAL_ADDRESS``, default
    ``127.0.0.1:7233``); ``namespace`` (``HANGO_TEMPORAL_NAMESPACE``, default ``default``);
    ``task_queue`` runs are started on (``HANGO_TEMPORAL_TASK_QUEUE``, default ``hango``);
    ``heartbeat_seconds``: how long a step's worker may go silent before the step is retried
    on another worker (``HANGO_TEMPORAL_HEARTBEAT_SECONDS``, default 10);
    ``decision_seconds``: how long a suspended run waits for a person before each waiting call
    gets ``timeout_decision`` (``HANGO_TEMPORAL_DECISION_SECONDS``, default: for ever;
    ``HANGO_TEMPORAL_TIMEOUT_DECISION``, ``reject`` (default) or ``approve``)."""

    address: str = DEFAULT_ADDRESS
    namespace: str = "default"
    task_queue: str = "hango"
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    decision_seconds: float | None = None
    timeout_decision: str = "reject"

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
        decision = duration_setting(
            settings, "HANGO_TEMPORAL_DECISION_SECONDS", None, positive=True
        )
        on_timeout = settings.get("HANGO_TEMPORAL_TIMEOUT_DECISION") or "reject"
        if on_timeout not in ("reject", "approve"):
            raise ConfigError(
                f"HANGO_TEMPORAL_TIMEOUT_DECISION must be reject or approve, got {on_timeout!r}"
            )
        return cls(
            heartbeat_seconds=heartbeat,
            decision_seconds=decision,
            timeout_decision=on_timeout,
            **values,
        )
