"""The ``RunStore`` protocol: agents, sessions, runs and messages, every query scoped by tenant.

Two back ends implement it with the same behaviour and the same contract tests: SQLite
(``hango.store.sqlite``, the embedded default) and PostgreSQL (``hango.store.postgres``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from attrs import evolve, field, frozen

from hango.agent.events import RunStatus
from hango.agent.storable import replace_lone_surrogates
from hango.convert import message_from_json
from hango.provider.messages import JSON, Message, StopReason

_V = TypeVar("_V")

#: What ``RunStore.ids_between`` looks up.
IdKind: TypeAlias = Literal["run", "session"]

#: Statuses a run can be resumed from.
RESUMABLE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED})


class StoreError(Exception):
    """Base class of store failures."""


class NotFound(StoreError):
    """No such agent, session or run for this tenant (another tenant's ids are invisible)."""


class StaleVersion(StoreError):
    """A save carried a version older than the run's: another writer saved in between.

    Nothing was written."""


class AmbiguousId(StoreError):
    """An id prefix matches more than one run or session (the message lists them)."""


class SessionBusy(StoreError):
    """A session already has a queued, running or suspended run (a suspended run's history
    ends with calls that wait for a decision)."""


class RunBusy(StoreError):
    """Another executor (a task, process or worker) holds the run's claim, a lease it still
    renews: nothing was run or written. The message names the run, the holder and when the
    claim lapses unless renewed (a crashed holder's claim is taken over from then on)."""


class SchemaError(StoreError):
    """The database schema is not one this code can use (for example, newer than the code)."""


class LeaseLost(StoreError):
    """The lease is no longer this worker's: it expired and another worker claimed the run (or
    it was released).

    Nothing was written. The old holder must stop: every later write it attempts under that
    lease (``save_run`` with ``RunSave.lease``, ``renew_lease``, ``release_run``) is refused too."""


class StoreUnavailable(StoreError):
    """The database could not be reached (connections refused or terminated, the pool timed
    out) for the whole retry time (``HANGO_DB_RETRY_SECONDS``, see ``hango.store.retry``).

    An infrastructure fault, not the run's: a worker stops working on the run and leaves it to
    be reclaimed (lease expiry) instead of failing it. Whether the last write was applied is
    unknown; a later write under the same lease or version finds out."""


class UnstorableContent(StoreError):
    """A save held content the database cannot store (a NUL character in ``state_json`` on
    PostgreSQL's jsonb, a lone UTF-16 surrogate, a non-finite number). Nothing was written."""


@frozen
class AgentRecord:
    """An immutable agent version: ``definition`` is the agent file as a JSON object."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    name: str
    definition: dict[str, Any]


@frozen
class RunRecord:
    """A run row. ``message_start`` is the session index of the run's user message;
    ``state`` is the decoded ``runs.state_json`` (or the raw text if it does not decode: that
    is ``load_state``'s to report);
    ``version`` increments on every save. ``config`` is what the run was started with
    (``runs.config_json``): ``{"stack": [{"name", "distribution", "version"}, ...], "model":
    SPEC, "base_url": URL | None, "queued": bool}`` (``queued``: started for workers), ``{}`` for
    a run recorded before migration 0004."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: uuid.UUID
    status: RunStatus
    error: str | None
    stop_reason: StopReason | None
    message_start: int
    version: int
    state: JSON
    created_at: dt.datetime
    updated_at: dt.datetime
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: dt.datetime | None = None
    config: dict[str, Any] = field(factory=dict)
    #: A sub-agent's run: the run that delegated to it and the id of the parent's tool call
    #: it answers (migration 0009); None for a top-level run.
    parent_run_id: uuid.UUID | None = None
    parent_tool_call_id: str | None = None
    #: What in the row does not decode (``"runs.config_json: not a JSON object (a list)"``),
    #: the column replaced by a neutral value; None for a sound row. ``list_runs`` returns such
    #: rows so one bad row never hides the others; ``get_run`` raises ``CorruptRow``.
    problem: str | None = None


class CorruptRow(StoreError):
    """A stored row that does not decode; the message names the run (or agent), the column
    and what is wrong with it."""


def run_from_row(row: Mapping[str, Any]) -> RunRecord:
    """A ``RunRecord`` from a ``runs`` row, as SQLite (text ids, times and JSON) or PostgreSQL
    (typed values) returns it. Every column is decoded on its own: one that does not decode is
    named in ``problem`` and replaced (a nil UUID, the epoch, ``{}``), so the row can still be
    listed."""
    problems: list[str] = []

    def column(name: str, convert: Callable[[Any], _V], neutral: _V) -> _V:
        try:
            return convert(row[name])
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"runs.{name}: {exc}")
            return neutral

    def as_uuid(value: Any) -> uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    def as_time(value: Any) -> dt.datetime:
        return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)

    def as_json(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})") from None

    def as_object(value: Any) -> dict[str, Any]:
        decoded = as_json(value)
        if not isinstance(decoded, dict):
            raise TypeError(f"not a JSON object (a {type(decoded).__name__})")
        return decoded

    def as_state(value: Any) -> JSON:
        # Kept as it is when it does not decode: loading the state says what is wrong with
        # it (StateError), and a failed run keeps it for a person to repair.
        try:
            return as_json(value)
        except ValueError:
            return value

    epoch = dt.datetime.fromtimestamp(0, dt.UTC)
    nil = uuid.UUID(int=0)
    record = RunRecord(
        id=column("id", as_uuid, nil),
        tenant_id=column("tenant_id", as_uuid, nil),
        session_id=column("session_id", as_uuid, nil),
        agent_id=column("agent_id", as_uuid, nil),
        status=column("status", RunStatus, RunStatus.FAILED),
        error=row["error"],
        stop_reason=column("stop_reason", lambda v: StopReason(v) if v else None, None),
        message_start=row["message_start"],
        version=row["version"],
        state=column("state_json", as_state, {}),
        created_at=column("created_at", as_time, epoch),
        updated_at=column("updated_at", as_time, epoch),
        attempts=row["attempts"],
        lease_owner=row["lease_owner"],
        lease_expires_at=column(
            "lease_expires_at", lambda v: None if v is None else as_time(v), None
        ),
        config=column("config_json", as_object, {}),
        parent_run_id=column("parent_run_id", lambda v: None if v is None else as_uuid(v), None),
        parent_tool_call_id=column("parent_tool_call_id", lambda v: v, None),
    )
    if problems:
        record = evolve(record, problem="; ".join(problems))
    return record


def sound(record: RunRecord, name: uuid.UUID | str) -> RunRecord:
    """``record``, or ``CorruptRow`` naming run ``name`` and what in its row is wrong."""
    if record.problem is not None:
        raise CorruptRow(f"run {name}: {record.problem}")
    return record


@frozen
class Lease:
    """A worker's hold on one run, from ``claim_run``.

    ``token`` is new on every claim and is what ``renew_lease`` and ``release_run`` check, so
    a worker whose lease expired cannot touch the run again. ``owner`` names the worker (for
    people reading ``runs show``); ``attempt`` counts the claims of this run that did not end
    in a release, this one included (above 1: earlier holders died with it or lost their
    lease; a graceful hand-back does not count); ``seconds`` is the lease length;
    ``expires_at`` is when it lapses unless renewed (the database's clock on PostgreSQL, so
    workers' clocks need not agree).
    """

    tenant_id: uuid.UUID
    run_id: uuid.UUID
    token: uuid.UUID
    owner: str
    attempt: int
    seconds: float
    expires_at: dt.datetime


@frozen
class RunSave:
    """One save of a run (``RunStore.save_run``), fenced by ``version`` and ``lease``.

    ``status``, ``error`` and ``stop_reason`` replace the run's. ``state`` replaces its
    state_json: a JSON object (encoded by the store), or its compact JSON text already
    encoded (what the runner's saver passes: it re-encodes only the parts that changed), or
    None to leave state_json as it is (so a run whose stored state is corrupt can be marked
    failed without losing it). ``messages`` replace the session's messages from index
    ``from_index`` on; ``from_index=None`` leaves the messages. ``lease``: the worker's, whose
    token the run must still hold (None: a run in a terminal, fenced by its version only).
    """

    tenant_id: uuid.UUID
    run_id: uuid.UUID
    version: int = field(kw_only=True)
    status: RunStatus = field(kw_only=True)
    state: dict[str, Any] | str | None = field(kw_only=True)
    messages: Sequence[Message] = field(default=(), kw_only=True)
    from_index: int | None = field(default=None, kw_only=True)
    error: str | None = field(default=None, kw_only=True)
    stop_reason: StopReason | None = field(default=None, kw_only=True)
    lease: Lease | None = field(default=None, kw_only=True)

    def state_text(self) -> str | None:
        """``state`` as the text to store (None: leave it); ``UnstorableContent`` as
        ``storable_json``."""
        if self.state is None:
            return None
        what = f"run {self.run_id}: its state"
        if isinstance(self.state, str):
            return storable_text_json(self.state, what)
        return storable_json(self.state, what)


class QueueWatch(Protocol):
    """Wakes an idle worker when a run is queued (see ``RunStore.watch_queue``)."""

    async def wait(self) -> None:
        """Return when a run may have been queued for the watched tenant since the watch
        started or the last ``wait`` returned: on PostgreSQL when its notification arrives
        (one that came while nobody waited is kept, not lost); on SQLite, which has no
        notifications, after a poll interval. Bound it with a cancel scope
        (``anyio.move_on_after``) to re-check for expired leases, which notify no one."""
        ...


class RunStore(Protocol):
    """Persistence of runs. All methods are async; ids are UUIDs; every call takes the tenant.

    Durability contract, for every method: a transient fault (a connection terminated or
    refused, a pool timeout) is retried on a fresh connection for ``HANGO_DB_RETRY_SECONDS``
    and then raised as ``StoreUnavailable``; a write retried after its connection died is not
    applied twice. Lease fencing: everything a worker writes to a run it holds goes through
    its ``Lease`` (``RunSave.lease``, ``renew_lease``, ``release_run``) and is refused
    with ``LeaseLost`` (or ``False``) once the lease is no longer the run's.
    """

    async def put_agent(
        self, tenant_id: uuid.UUID, name: str, definition: dict[str, Any]
    ) -> AgentRecord:
        """Store an agent version (idempotent: the same definition gives the same id)."""
        ...

    async def get_agent(self, tenant_id: uuid.UUID, agent_id: uuid.UUID) -> AgentRecord:
        """Raises ``NotFound``."""
        ...

    async def create_run(
        self,
        tenant_id: uuid.UUID,
        agent_id: uuid.UUID,
        message: Message,
        *,
        session_id: uuid.UUID | None = None,
        status: RunStatus = RunStatus.RUNNING,
        config: dict[str, Any] | None = None,
        parent_run_id: uuid.UUID | None = None,
        parent_tool_call_id: str | None = None,
    ) -> RunRecord:
        """Create a run (and a new session unless ``session_id`` is given) and append its user
        ``message`` to the session. Its state_json starts as ``{}`` (no state saved yet);
        ``config`` (what it is started with, see ``RunRecord``) is stored as config_json.
        ``parent_run_id`` / ``parent_tool_call_id`` make it a sub-agent's child run answering
        that tool call of that run (both or neither; one child per call, else ``SessionBusy``).

        Raises ``NotFound`` for an unknown session and ``SessionBusy`` when the session has a
        queued, running or suspended run.
        """
        ...

    async def get_run(self, tenant_id: uuid.UUID, run_id: uuid.UUID) -> RunRecord:
        """Raises ``NotFound``."""
        ...

    async def list_runs(
        self, tenant_id: uuid.UUID, *, limit: int = 50, session_id: uuid.UUID | None = None
    ) -> list[RunRecord]:
        """Newest first."""
        ...

    async def child_runs(self, tenant_id: uuid.UUID, parent_run_id: uuid.UUID) -> list[RunRecord]:
        """The child runs of ``parent_run_id`` (sub-agent delegations), oldest first."""
        ...

    async def ids_between(
        self,
        tenant_id: uuid.UUID,
        kind: IdKind,
        low: uuid.UUID,
        high: uuid.UUID,
        *,
        limit: int = 10,
    ) -> list[uuid.UUID]:
        """The tenant's run ids (``kind="run"``) or session ids (``"session"``) from ``low`` to
        ``high`` inclusive, in id order, at most ``limit``: what an id prefix matches (see
        ``resolve_id``), looked up through the primary key."""
        ...

    async def load_messages(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, *, start: int = 0
    ) -> list[Message]:
        """The session's history in order, from session index ``start`` on (0: all of it; a
        run whose history is compacted loads from its ``State.history_mark``, so its cost does
        not grow with the session's length). Raises ``StoreError`` naming the row of a message
        that does not decode."""
        ...

    async def load_message(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, seq: int
    ) -> Message | None:
        """The session's message at index ``seq`` (0-based), None when there is none; reads
        that one row. ``StoreError`` naming the row when it does not decode."""
        ...

    async def save_run(self, save: RunSave) -> int:
        """Atomically apply ``save`` (see ``RunSave``): set status, error, stop reason and
        state_json, and replace the session's messages from ``save.from_index`` on with
        ``save.messages``. Returns the new version.

        ``save.lease`` fences the write: an executor passes the lease it claimed the run with
        (``claim_run`` or ``acquire_run``), and the save happens only while the run still holds
        that lease's token (its expiry is not checked: another claim is what replaces the
        token). Without a lease (a decision, a store-level write) only ``save.version`` is
        checked.

        Raises, writing nothing: ``LeaseLost`` when the run no longer holds ``lease``;
        ``StaleVersion`` when its version is not ``version``; ``UnstorableContent`` for a
        state or message the database cannot hold; ``StoreUnavailable`` when the database
        stayed unreachable (then whether the save was applied is unknown).
        """
        ...

    # -- claims ------------------------------------------------------------------------------

    async def acquire_run(
        self, tenant_id: uuid.UUID, run_id: uuid.UUID, owner: str, *, lease_seconds: float
    ) -> Lease:
        """Claim run ``run_id`` by id for one executor (``Harness.execute`` / ``step``, not a
        worker): atomically, unless another claim on it is live, the run gets a new lease of
        ``lease_seconds`` (a new token, ``owner``) and its version increments; its status and
        ``attempts`` stay. An expired claim (its executor crashed or hung) is taken over.

        Raises, writing nothing: ``NotFound``; ``RunBusy`` when the run is held under a live
        lease (by a worker or another executor, in this process or another), naming the
        holder. Every save under the returned lease is fenced by its token; ``release_run``
        gives it up (keeping the status), ``renew_lease`` extends it."""
        ...

    # -- the queue ----------------------------------------------------------------------------

    async def claim_run(
        self,
        tenant_id: uuid.UUID,
        owner: str,
        *,
        lease_seconds: float,
        installed: Collection[str] | None = None,
    ) -> Lease | None:
        """Take the oldest claimable run of the tenant, or ``None`` when there is none.

        ``installed``: the middleware names this worker can build; a run whose recorded stack
        names one outside it is left for a worker that has it (None: no filter). A run
        recorded for another engine (``config["engine"]``, ``hango submit --engine``) is never
        taken: that engine executes it.

        Claimable: status ``queued`` without a live lease (one still held is a run being handed
        back, between its last save and its release), or ``running`` (or ``cancelled``: killed
        between saving and releasing) under a worker's lease that has expired, its worker gone.
        A run without a lease, or held by ``acquire_run`` (``hango run`` in a terminal), is
        never taken unless queued.
        Atomically, the run becomes ``running`` under a new lease of ``lease_seconds``, its
        ``attempts`` and ``version`` increment (the previous holder's token is gone, so its
        writes raise ``LeaseLost``; a reader without a lease gets ``StaleVersion``). Concurrent
        claims never return the same run: PostgreSQL uses ``SELECT ... FOR UPDATE SKIP
        LOCKED``, SQLite a ``BEGIN IMMEDIATE`` transaction.
        """
        ...

    async def renew_lease(self, lease: Lease) -> Lease:
        """Extend the lease by ``lease.seconds`` from now; returns the renewed lease.

        Raises ``LeaseLost`` (writing nothing) when the run was claimed by someone else or
        released. Does not change the run's version or ``updated_at``."""
        ...

    async def release_run(self, lease: Lease, *, counted: bool = False) -> bool:
        """Give up the lease. A claim from ``acquire_run`` is only cleared (the run keeps its
        status, error and attempts). A worker's claim (``claim_run``): clear it, and put a run
        that did not finish (``queued``, ``running`` or ``cancelled``) back to ``queued`` with
        no error; a suspended run keeps its status (it waits for a person), a finished one its
        status and error. Unless the run finished or ``counted`` is True, ``attempts`` goes one
        lower, back to what it was before this claim (a hand-back or a suspension is not an
        attempt: only claims that ended in a crash, an expired lease or, ``counted``, a worker
        killed while the run was mid-turn count). Increments the version. Returns ``False``,
        writing nothing, when the lease was no longer held."""
        ...

    def watch_queue(
        self, tenant_id: uuid.UUID
    ) -> contextlib.AbstractAsyncContextManager[QueueWatch]:
        """Watch for runs queued for ``tenant_id``. Enter before the first ``claim_run`` so no
        run queued in between is missed: PostgreSQL LISTENs on the tenant's channel
        ``hango_runs_<tenant hex>`` (a trigger NOTIFYs whenever a row becomes queued); SQLite
        has no notifications, so its watch only sleeps a poll interval."""
        ...

    async def aclose(self) -> None: ...


def run_busy(run_id: uuid.UUID, owner: str | None, expires: dt.datetime | None) -> RunBusy:
    """The ``RunBusy`` of a run held by ``owner`` until ``expires``."""
    until = "" if expires is None else f" until {expires.astimezone(dt.UTC):%H:%M:%S} UTC"
    return RunBusy(
        f"run {run_id} is being executed by {owner}; its claim lasts{until} unless renewed, "
        "so one executor runs it at a time: nothing was run or written (if that executor is "
        "gone, try again once its claim has lapsed)"
    )


def agent_id_for(tenant_id: uuid.UUID, canonical_definition: str) -> uuid.UUID:
    """The id of an agent version: a UUID5 of the tenant and the canonical JSON definition."""
    return uuid.uuid5(tenant_id, canonical_definition)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def corrupt_message(session_id: uuid.UUID, seq: int, exc: Exception) -> StoreError:
    return StoreError(f"message {seq} of session {session_id} is corrupt: {exc}")


def message_from_row(session_id: uuid.UUID, seq: int, role: str, content: Any) -> Message:
    """A stored message (decoded JSON ``content``); ``StoreError`` naming the row if malformed."""
    try:
        return message_from_json({"role": role, "content": content})
    except ValueError as exc:
        raise corrupt_message(session_id, seq, exc) from exc


def storable_json(value: Any, what: str) -> str:
    """``value`` as compact JSON text (non-ASCII kept as is) that both stores can hold.

    Raises ``UnstorableContent`` naming ``what`` (e.g. ``"run 1234...: its state"``) when
    ``value`` holds a non-finite number (NaN and Infinity are not JSON; PostgreSQL refuses them)
    or a lone UTF-16 surrogate (not encodable as UTF-8, so no database driver can send it)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise UnstorableContent(
            f"{what} holds a non-finite number (NaN or Infinity), which is not JSON; "
            "nothing was saved"
        ) from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _surrogate(text, exc, what) from exc
    return text


def _surrogate(text: str, exc: UnicodeEncodeError, what: str) -> UnstorableContent:
    bad = text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
    return UnstorableContent(
        f"{what} holds a lone UTF-16 surrogate ({bad}), which is not valid Unicode text; "
        "nothing was saved"
    )


def storable_text_json(text: str, what: str) -> str:
    """``text`` (JSON already encoded with ``allow_nan=False``) if both stores can hold it;
    ``UnstorableContent`` naming ``what`` for a lone UTF-16 surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _surrogate(text, exc, what) from exc
    return text


def storable_text(text: str) -> str:
    """``text`` (a run's error message) with what no text column can hold replaced by U+FFFD:
    NUL characters (PostgreSQL) and lone surrogates (any UTF-8 driver)."""
    return replace_lone_surrogates(text.replace("\x00", "\ufffd"))


#: The shortest id prefix ``resolve_id`` accepts, as git does for object names.
MIN_PREFIX = 4


def prefix_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and the largest UUID whose text starts with ``prefix`` (case-insensitive;
    dashes may be left out). Raises ``ValueError`` for a character that is not a hex digit or
    a dash in its place, or more than 32 digits."""
    text = prefix.strip().lower()
    digits = text.replace("-", "")
    canonical = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    dashes_fit = all(canonical[i] == "-" for i, c in enumerate(text) if c == "-")
    if (
        not digits
        or len(digits) > 32
        or len(text) > len(canonical)
        or not dashes_fit
        or any(c not in "0123456789abcdef" for c in digits)
    ):
        raise ValueError(f"{prefix!r} is not a UUID or the start of one")
    pad = 32 - len(digits)
    return uuid.UUID(digits + "0" * pad), uuid.UUID(digits + "f" * pad)


async def resolve_id(store: RunStore, tenant_id: uuid.UUID, kind: IdKind, text: str) -> uuid.UUID:
    """The run or session id that ``text`` names: a whole UUID, or a prefix of at least
    ``MIN_PREFIX`` characters that starts exactly one of the tenant's ids (as git takes object
    names). Raises ``ValueError`` for text that is neither, ``NotFound`` when no id starts
    with it, ``AmbiguousId`` (listing the candidates) when several do."""
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    try:
        low, high = prefix_range(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a {kind} id (a UUID or its first characters)") from None
    if len(text.replace("-", "")) < MIN_PREFIX:
        raise ValueError(
            f"{text!r} is too short for a {kind} id: give at least {MIN_PREFIX} characters"
        )
    found = await store.ids_between(tenant_id, kind, low, high, limit=6)
    if not found:
        raise NotFound(f"no {kind} id starts with {text!r}")
    if len(found) > 1:
        shown = ", ".join(str(i) for i in found[:5]) + (", ..." if len(found) > 5 else "")
        raise AmbiguousId(f"{kind} id prefix {text!r} is ambiguous: {shown}")
    return found[0]
