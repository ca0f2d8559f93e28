"""Run state: what a run carries between turns and what is persisted in ``runs.state_json``.

Middleware private state lives in ``State.private`` as JSON values keyed by middleware name and
is read and written only through ``load_private`` / ``store_private``, which go through the one
cattrs converter. So a resumed run rebuilds each middleware's typed value from the database
instead of handing it a loose dict, and a missing or malformed value is reported, never
silently defaulted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import cattrs
from attrs import define, field, frozen

from hango import telemetry
from hango.convert import CONVERTER
from hango.provider.messages import JSON, Message, Usage

T = TypeVar("T")

#: Version of the ``runs.state_json`` document written by ``dump_state``.
STATE_VERSION = 1

TodoStatus = Literal["pending", "in_progress", "completed"]


@frozen
class Todo:
    """One planned step: ``content`` (non-empty text) and ``status``."""

    content: str
    status: TodoStatus = "pending"


@define
class State:
    """The state of one run.

    ``messages`` is the working history (persisted in the messages table, not in state_json).
    ``todos`` is the one typed cross-middleware field. ``private`` maps a middleware name to
    its JSON value. ``usage`` is the run's token usage so far: the loop adds each model call's
    as it completes, so it is saved with every checkpoint, kept by a run that fails and summed
    across resumes. ``scratch`` is per-batch working data: the loop clears it after every tool
    batch and it is never persisted.
    """

    run_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: uuid.UUID
    tenant_id: uuid.UUID
    messages: list[Message] = field(factory=list)
    todos: list[Todo] = field(factory=list)
    private: dict[str, JSON] = field(factory=dict)
    usage: Usage = field(factory=Usage)
    scratch: dict[str, Any] = field(factory=dict)


class StateError(Exception):
    """Persisted state is malformed. ``middleware`` names its owner ("state" for the document
    itself) and ``path`` the bad field, for example ``$.counts['abc']``."""

    def __init__(self, middleware: str, path: str, detail: str) -> None:
        owner = (
            "run state (state_json)"
            if middleware == "state"
            else f"state of middleware {middleware!r}"
        )
        super().__init__(f"{owner} is malformed at {path}: {detail}")
        self.middleware = middleware
        self.path = path
        self.detail = detail


def _first_error(exc: Exception, root: str) -> tuple[str, str]:
    """(path, message) of the first error cattrs reports, e.g. ``("$.counts", "expected int")``."""
    messages = cattrs.transform_error(exc, path=root)
    first = messages[0] if messages else str(exc)
    detail, _, path = first.rpartition(" @ ")
    if not detail:
        return root, first
    # cattrs says "unknown error (bogus not in literal ...)" for a bad Literal value.
    if detail.startswith("unknown error (") and detail.endswith(")"):
        detail = detail.removeprefix("unknown error (")[:-1]
    return path, detail


def load_private(
    state: State, name: str, cls: type[T], default: Callable[[], T] | None = None
) -> tuple[T, bool]:
    """Middleware ``name``'s private value as a ``cls``, and whether it was found.

    A missing key gives ``(default(), False)`` (``default`` is ``cls`` unless given) and records
    the span event ``middleware.state_missing``. Raises ``StateError`` naming the middleware and
    the bad field's path when the stored value does not structure as ``cls``.
    """
    raw = state.private.get(name)
    if raw is None:
        telemetry.record(telemetry.STATE_MISSING, middleware=name)
        return (default or cls)(), False
    try:
        return CONVERTER.structure(raw, cls), True
    except Exception as exc:
        path, detail = _first_error(exc, "$")
        raise StateError(name, path, detail) from exc


def store_private(state: State, name: str, value: object) -> None:
    """Store ``value`` (an attrs instance or JSON-able value) as middleware ``name``'s state.

    Fails at once with ``StateError`` when the converter cannot turn it into JSON.
    """
    raw = CONVERTER.unstructure(value)
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and PostgreSQL's jsonb rejects them.
        json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StateError(name, "$", f"not JSON-serialisable: {exc}") from exc
    state.private[name] = raw


def dump_state(state: State) -> dict[str, JSON]:
    """The ``runs.state_json`` document: version, ids, todos and private state.

    Messages are stored in their own table and scratch is never persisted.
    """
    return {
        "version": STATE_VERSION,
        "run_id": str(state.run_id),
        "session_id": str(state.session_id),
        "agent_id": str(state.agent_id),
        "tenant_id": str(state.tenant_id),
        "todos": [{"content": t.content, "status": t.status} for t in state.todos],
        "private": state.private,
        "usage": CONVERTER.unstructure(state.usage),
    }


# version -> function upgrading a raw document of that version to the next one.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


@frozen
class _Document:
    run_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: uuid.UUID
    tenant_id: uuid.UUID
    todos: list[Todo] = field(factory=list)
    private: dict[str, Any] = field(factory=dict)
    usage: Usage = field(factory=Usage)  # absent from documents written before it was kept


def load_state(doc: JSON) -> State:
    """Rebuild a State (with empty ``messages``) from a ``dump_state`` document.

    Older versions are upgraded as raw dicts first. Raises ``StateError`` for a document that is
    not an object, is newer than this code, or has a malformed field (named by its path).
    """
    if not isinstance(doc, dict):
        raise StateError("state", "$", "state_json is not an object")
    version = doc.get("version")
    if not isinstance(version, int):
        raise StateError("state", "$.version", "missing or not an integer")
    if version > STATE_VERSION:
        raise StateError(
            "state", "$.version", f"{version} is newer than this hango ({STATE_VERSION})"
        )
    while version < STATE_VERSION:
        doc = _UPGRADES[version](doc)
        version += 1
    body = {k: v for k, v in doc.items() if k != "version"}
    try:
        parsed = CONVERTER.structure(body, _Document)
    except Exception as exc:
        path, detail = _first_error(exc, "$")
        raise StateError("state", path, detail) from exc
    return State(
        parsed.run_id,
        parsed.session_id,
        parsed.agent_id,
        parsed.tenant_id,
        todos=list(parsed.todos),
        private=dict(parsed.private),
        usage=parsed.usage,
    )
