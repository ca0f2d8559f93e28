"""Run state: what a run carries between turns and what is persisted in ``runs.state_json``.

Middleware private state lives in ``State.private`` as JSON values keyed by middleware name and
is read and written only through ``load_private`` / ``store_private``, which go through the one
cattrs converter. So a resumed run rebuilds each middleware's typed value from the database
instead of handing it a loose dict, and a missing or malformed value is reported, never
silently defaulted. What is stored is checked to be JSON when it is stored (a set becomes a
sorted list; a dict key that is not a string is refused, naming the middleware and the path),
and what is loaded is a fresh copy: nothing that is not JSON can reach a checkpoint.

Scope: ``todos`` belong to the session (a new run in a session starts with the previous run's
plan); a middleware's private value belongs to the run, unless the middleware's class declares
``state_scope = "session"``, in which case a new run starts with the previous run's value
(``new_run_state``). A resumed run keeps both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterable
from typing import Any, Final, Literal, TypeVar

import cattrs
from attrs import define, field, frozen
from cattrs.v import format_exception

from hango import telemetry
from hango.agent.interrupts.records import InterruptBook
from hango.convert import CONVERTER, json_value
from hango.provider.messages import JSON, Message, Usage

T = TypeVar("T")

StateScope = Literal["run", "session"]
#: The values a middleware's ``state_scope`` class attribute may take ("run" if absent).
STATE_SCOPES: Final[tuple[StateScope, ...]] = ("run", "session")

#: Version of the ``runs.state_json`` document written by ``dump_state`` (2: ``interrupts``).
STATE_VERSION = 2

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
    across resumes. ``interrupts`` holds the run's pending actions, decisions and started
    calls (``hango.agent.interrupts``). ``scratch`` is per-batch working data: the loop clears it
    after every tool batch and it is never persisted. ``output`` is the run's validated
    structured output (a JSON object; None until one is taken) and ``output_failures`` how
    many invalid ones the model gave, so a resumed run keeps its ``output_retries`` budget.
    """

    run_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: uuid.UUID
    tenant_id: uuid.UUID
    messages: list[Message] = field(factory=list)
    todos: list[Todo] = field(factory=list)
    private: dict[str, JSON] = field(factory=dict)
    usage: Usage = field(factory=Usage)
    interrupts: InterruptBook = field(factory=InterruptBook)
    scratch: dict[str, Any] = field(factory=dict)
    output: JSON = None
    output_failures: int = 0


class StateError(Exception):
    """State is malformed, or a value cannot be stored as JSON. ``middleware`` names its owner
    ("state" for the document itself) and ``path`` the bad field, for example
    ``$.counts['abc']``; ``problem`` says which of the two ("is malformed", "cannot be stored")."""

    def __init__(
        self, middleware: str, path: str, detail: str, *, problem: str = "is malformed"
    ) -> None:
        owner = (
            "run state (state_json)"
            if middleware == "state"
            else f"state of middleware {middleware!r}"
        )
        super().__init__(f"{owner} {problem} at {path}: {detail}")
        self.middleware = middleware
        self.path = path
        self.detail = detail


def _explain(exc: BaseException, cls: type | None) -> str:
    # The converter's strict hooks say what they expected and what they got.
    if type(exc) is ValueError:
        return str(exc)
    return format_exception(exc, cls)


def _first_error(exc: Exception, root: str) -> tuple[str, str]:
    """(path, message) of the first error cattrs reports, e.g. ``("$.counts", "expected int")``."""
    messages = cattrs.transform_error(exc, path=root, format_exception=_explain)
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
    the span event ``middleware.state_missing``. The value shares nothing with the stored JSON:
    changing it changes nothing until it is stored again. Raises ``StateError`` naming the
    middleware and the bad field's path when the stored value does not structure as ``cls``
    exactly (a string where an object or a number belongs is malformed, never coerced).
    """
    raw = state.private.get(name)
    if raw is None:
        telemetry.record(telemetry.STATE_MISSING, middleware=name)
        return (default or cls)(), False
    try:
        return CONVERTER.structure(json_value(raw), cls), True
    except Exception as exc:
        path, detail = _first_error(exc, "$")
        raise StateError(name, path, detail) from exc


def store_private(state: State, name: str, value: object) -> None:
    """Store ``value`` (an attrs instance or a JSON-able value) as middleware ``name``'s state.

    Sets and frozensets are stored as sorted lists, tuples as lists, enums as their values;
    what is stored is a copy. Raises ``StateError`` naming the middleware and the path at once,
    when storing, for anything JSON cannot hold: a dict key that is not a string, NaN, an
    object the converter does not know.
    """
    try:
        raw = json_value(CONVERTER.unstructure(value))
    except (ValueError, TypeError, RecursionError) as exc:
        path, _, detail = str(exc).partition(": ")
        if not path.startswith("$"):
            path, detail = "$", f"{type(exc).__name__}: {exc}"
        raise StateError(name, path, detail, problem="cannot be stored") from exc
    state.private[name] = raw


def dump_state(state: State) -> dict[str, JSON]:
    """The ``runs.state_json`` document: version, ids, todos, private state, usage and
    interrupts.

    Messages are stored in their own table and scratch is never persisted. Raises
    ``StateError`` naming the middleware when a private value is not JSON (written to
    ``State.private`` directly instead of through ``store_private``).
    """
    private = {name: _checked(name, raw) for name, raw in state.private.items()}
    return {**_head(state), "private": private, **_tail(state)}


def _checked(name: str, raw: JSON) -> JSON:
    try:
        return json_value(raw)
    except (ValueError, RecursionError) as exc:
        path, _, detail = str(exc).partition(": ")
        raise StateError(name, path or "$", detail, problem="cannot be stored") from exc


# The document around ``private``, in its key order: what comes before it and after it.
def _head(state: State) -> dict[str, JSON]:
    return {
        "version": STATE_VERSION,
        "run_id": str(state.run_id),
        "session_id": str(state.session_id),
        "agent_id": str(state.agent_id),
        "tenant_id": str(state.tenant_id),
        "todos": [{"content": t.content, "status": t.status} for t in state.todos],
    }


def _tail(state: State) -> dict[str, JSON]:
    return {
        "usage": CONVERTER.unstructure(state.usage),
        "interrupts": CONVERTER.unstructure(state.interrupts),
        # Absent until a run has an output: documents of runs without one stay as they were.
        **({} if state.output is None else {"output": state.output}),
        **({} if not state.output_failures else {"output_failures": state.output_failures}),
    }


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


#: A private value that is an object of at most this many keys is encoded key by key, each
#: part kept while it is the same object: a middleware that keeps a large, rarely replaced part
#: beside a small changing one (hango-repeat's counts) pays for the small one only.
_PARTS = 16


class StateEncoder:
    """``dump_state`` of one run's state as compact JSON text, made again at every save.

    A private value that is the same object as at the last ``encode`` keeps its text: values
    are replaced by ``store_private``, never mutated in place (``_Undo`` in the loop relies on
    it too), so a run whose middlewares keep large values pays for a value only when it
    changes; a value that is an object of at most ``_PARTS`` keys is kept part by part the same
    way. A changed part is encoded by ``json`` and checked by reading it back (C speed); only
    one that does not read back as itself (a tuple, a key that is not a string) goes through
    ``json_value``, which names the path of what is not JSON.
    """

    def __init__(self) -> None:
        # name -> (the value as last encoded, held so its id is not reused; its text; its
        # parts by key when encoded part by part)
        self._private: dict[str, _Encoded] = {}

    def encode(self, state: State) -> str | dict[str, JSON]:
        """The document as text; or, when its fixed part holds something ``json`` refuses
        (a non-finite number), the ``dump_state`` dict, so the store raises its
        ``UnstorableContent``. Raises ``StateError`` as ``dump_state``."""
        texts: dict[str, _Encoded] = {}
        for name, raw in state.private.items():
            known = self._private.get(name)
            if known is not None and known.value is raw:
                texts[name] = known
            else:
                texts[name] = _encoded(name, raw, known)
        try:
            head, tail = _compact(_head(state)), _compact(_tail(state))
        except ValueError:
            return dump_state(state)
        self._private = texts
        private = ",".join(f"{_compact(name)}:{e.text}" for name, e in texts.items())
        return f'{head[:-1]},"private":{{{private}}},{tail[1:]}'


@frozen
class _Encoded:
    value: JSON
    text: str
    parts: dict[str, tuple[JSON, str]] | None = None


def _encoded(name: str, raw: JSON, known: _Encoded | None) -> _Encoded:
    if type(raw) is dict and len(raw) <= _PARTS and all(type(k) is str for k in raw):
        before = {} if known is None or known.parts is None else known.parts
        parts: dict[str, tuple[JSON, str]] = {}
        for key, item in raw.items():
            old = before.get(key)
            if old is not None and old[0] is item:
                parts[key] = old
                continue
            part = _text(item)
            if part is None:
                break  # not JSON as it is: the whole value is checked below, naming the path
            parts[key] = (item, part)
        else:
            body = ",".join(f"{_compact(k)}:{text}" for k, (_, text) in parts.items())
            return _Encoded(raw, f"{{{body}}}", parts)
    text = _text(raw)
    return _Encoded(raw, text if text is not None else _compact(_checked(name, raw)))


def _text(value: JSON) -> str | None:
    """``value``'s compact JSON if it reads back as itself, else None."""
    try:
        text = _compact(value)
        if json.loads(text) == value:
            return text
    except (ValueError, TypeError, RecursionError):
        pass
    return None


def _add_interrupts(doc: dict[str, Any]) -> dict[str, Any]:
    # Version 1 had no interrupts: nothing pending, started or decided.
    return {**doc, "version": 2, "interrupts": {}}


# version -> function upgrading a raw document of that version to the next one.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _add_interrupts}


@frozen
class _Document:
    run_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: uuid.UUID
    tenant_id: uuid.UUID
    todos: list[Todo] = field(factory=list)
    private: dict[str, Any] = field(factory=dict)
    usage: Usage = field(factory=Usage)  # absent from documents written before it was kept
    interrupts: InterruptBook = field(factory=InterruptBook)
    output: Any = None
    output_failures: int = 0


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
        upgrade = _UPGRADES.get(version)
        if upgrade is None:
            raise StateError(
                "state",
                "$.version",
                f"{version} has no upgrade path (this hango reads versions "
                f"{min(_UPGRADES, default=STATE_VERSION)} to {STATE_VERSION})",
            )
        doc = upgrade(doc)
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
        interrupts=parsed.interrupts,
        output=parsed.output,
        output_failures=parsed.output_failures,
    )


def load_run_state(
    doc: JSON, *, run_id: uuid.UUID, session_id: uuid.UUID, tenant_id: uuid.UUID
) -> State:
    """``load_state`` of a run's own ``runs.state_json`` row: the document must name that run,
    session and tenant. Raises ``StateError`` (at ``$.run_id``, ...) for one that names
    another, so state copied between rows is refused rather than trusted."""
    state = load_state(doc)
    for field_name, expected in (
        ("run_id", run_id),
        ("session_id", session_id),
        ("tenant_id", tenant_id),
    ):
        found = getattr(state, field_name)
        if found != expected:
            raise StateError(
                "state", f"$.{field_name}", f"{found} is not this row's {field_name} {expected}"
            )
    return state


def new_run_state(
    previous: JSON | None,
    *,
    run_id: uuid.UUID,
    session_id: uuid.UUID,
    agent_id: uuid.UUID,
    tenant_id: uuid.UUID,
    session_scoped: Collection[str] = (),
) -> State:
    """The state a new run of a session starts with (``messages`` empty: the runner loads the
    session's history).

    ``previous`` is the ``runs.state_json`` of the session's previous run (``None`` or ``{}``
    when there is none, or it never ran). The new run gets its todos (the plan is the
    conversation's) and the private values of the middlewares named in ``session_scoped``;
    every other private value starts fresh, and so does usage. Raises ``StateError`` when
    ``previous`` is malformed.
    """
    state = State(run_id, session_id, agent_id, tenant_id)
    if not previous:
        return state
    before = load_state(previous)
    state.todos = list(before.todos)
    state.private = {k: v for k, v in before.private.items() if k in session_scoped}
    return state


def state_scope_problem(middleware: object) -> str | None:
    """What is wrong with ``middleware``'s ``state_scope`` class attribute (one of
    ``STATE_SCOPES``, "run" if absent), or None; the chain raises it as a ``MiddlewareError``
    naming the middleware."""
    scope = getattr(type(middleware), "state_scope", "run")
    if scope in STATE_SCOPES:
        return None
    return f"declares state_scope = {scope!r}; use 'run' or 'session'"


def session_scoped(middlewares: Iterable[Any]) -> frozenset[str]:
    """Names of the middlewares whose class declares ``state_scope = "session"``: their
    private state carries over to the session's next run (``new_run_state``). Every other
    middleware's private state is per run (``state_scope = "run"``, the default)."""
    return frozenset(
        m.name for m in middlewares if getattr(type(m), "state_scope", "run") == "session"
    )


#: The private-state key that holds tool narrowings: the ``tool_allowlist`` middleware's own,
#: which enforces them (the innermost slot, so no other middleware can widen one).
NARROWING_KEY: Final = "tool_allowlist"


@frozen
class _Narrowings:
    # Narrowing middleware name -> the tool names it leaves visible and callable.
    narrowed_by: dict[str, list[str]] = field(factory=dict)


def _narrowings(state: State) -> _Narrowings:
    raw = state.private.get(NARROWING_KEY)
    if raw is None:
        return _Narrowings()
    try:
        return CONVERTER.structure(json_value(raw), _Narrowings)
    except Exception as exc:
        path, detail = _first_error(exc, "$")
        raise StateError(NARROWING_KEY, path, detail) from exc


def narrow_tools(state: State, by: str, tools: Collection[str] | None) -> None:
    """Narrow the tools of this run to ``tools`` on behalf of middleware ``by`` (``None``
    lifts ``by``'s narrowing).

    While a narrowing is set, the ``tool_allowlist`` middleware shows the model only the tools
    every narrowing names (and the agent's ``tool_allowlist`` allows) and refuses a call to any
    other, whatever the middlewares outside it add. A narrowing belongs to the run: it is saved
    with the run's state, so a resumed run keeps it. Raises ``StateError`` when the stored
    narrowings are malformed.
    """
    current = _narrowings(state)
    narrowed = dict(current.narrowed_by)
    if tools is None:
        narrowed.pop(by, None)
    else:
        narrowed[by] = sorted(set(tools))
    if narrowed:
        store_private(state, NARROWING_KEY, _Narrowings(narrowed))
    else:
        state.private.pop(NARROWING_KEY, None)


def tool_narrowing(state: State) -> tuple[frozenset[str] | None, tuple[str, ...]]:
    """The tools this run is narrowed to (the intersection of every ``narrow_tools`` call in
    force; ``None`` when there is none) and the names of the middlewares that narrowed it, in
    name order. Raises ``StateError`` when the stored narrowings are malformed."""
    narrowed = _narrowings(state).narrowed_by
    if not narrowed:
        return None, ()
    allowed = frozenset.intersection(*(frozenset(names) for names in narrowed.values()))
    return allowed, tuple(sorted(narrowed))
