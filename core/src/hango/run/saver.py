"""``Saver``: every save of one run's execution, each written only if it changes something."""

from __future__ import annotations

import anyio
import attrs

from hango.agent.events import RunStatus
from hango.agent.loop import LoopOutcome
from hango.agent.state import State, StateEncoder, StateError
from hango.provider.messages import JSON, Message, StopReason
from hango.store.base import Lease, RunRecord, RunSave, RunStore, UnstorableContent


class Saver:
    """Saves one run: tracks its version and the history as last saved, so each save writes
    only the messages from the first one that changed, and encodes the state document again
    only where it changed (``StateEncoder``). A save that would write exactly the row already
    stored (same status, error, stop reason, state and history) is skipped: it would be
    durable already. Every save is fenced by ``lease`` (``None``: a run in a terminal, fenced
    by its version only)."""

    def __init__(self, store: RunStore, run: RunRecord, lease: Lease | None = None) -> None:
        self.store = store
        self.run = run
        self.lease = lease
        self.version = run.version
        self.saved: list[Message] = []
        self._encoder = StateEncoder()
        # What the row holds since this saver's last save (None: not known, save anyway).
        self._written: tuple[RunStatus, str | None, StopReason | None, str] | None = None

    async def save(
        self,
        state: State,
        status: RunStatus,
        *,
        error: str | None = None,
        stop_reason: StopReason | None = None,
    ) -> None:
        """Save ``state`` and its history with ``status``; ``StateError`` for a private value
        that is not JSON, and what ``RunStore.save_run`` raises."""
        current = state.messages
        first = _first_change(self.saved, current)
        document: str | dict[str, JSON] = self._encoder.encode(state)
        row = (status, error, stop_reason, document) if isinstance(document, str) else None
        if row is not None and row == self._written and first == len(current) == len(self.saved):
            return
        save = RunSave(
            self.run.tenant_id,
            self.run.id,
            version=self.version,
            status=status,
            state=document,
            messages=current[first:],
            from_index=first,
            error=error,
            stop_reason=stop_reason,
            lease=self.lease,
        )
        # Shielded: a save cancelled half way (Ctrl-C) may still commit, and a version this
        # saver no longer knows would make the cancelled-save after it fail, leaving the run
        # "running" with no owner. The save ends (or fails) by itself within the retry time.
        self._written = None
        with anyio.CancelScope(shield=True):
            self.version = await self.store.save_run(save)
        self.saved = list(current)
        self._written = row

    async def finish(self, state: State, outcome: LoopOutcome) -> LoopOutcome:
        """Save the run's last state with the outcome's status; returns the outcome saved. If
        the state cannot be saved (content the store cannot hold, a private value that is not
        JSON), the run is failed instead, keeping the state and history saved last (nothing is
        lost that was saved, and nothing is left ``running``): with the outcome's own error if
        it failed already, else with the reason it could not be saved."""
        try:
            await self.save(
                state, outcome.status, error=outcome.error, stop_reason=outcome.stop_reason
            )
        except (UnstorableContent, StateError) as exc:
            failed_already = outcome.status is RunStatus.FAILED and outcome.error
            error = outcome.error if failed_already else str(exc)
            await self.mark_failed(error or str(exc))
            return attrs.evolve(outcome, status=RunStatus.FAILED, error=error)
        return outcome

    async def mark_failed(self, error: str) -> None:
        """Fail the run with ``error``, leaving its stored state and history as they are."""
        self._written = None
        save = RunSave(
            self.run.tenant_id,
            self.run.id,
            version=self.version,
            status=RunStatus.FAILED,
            state=None,
            error=error,
            lease=self.lease,
        )
        with anyio.CancelScope(shield=True):
            self.version = await self.store.save_run(save)


def _first_change(saved: list[Message], current: list[Message]) -> int:
    """Index of the first message that differs.

    The common case (history only grew) is one list comparison, which runs in C and compares
    by identity first, so a long session costs next to nothing per save."""
    n = min(len(saved), len(current))
    if saved[:n] == current[:n]:
        return n
    return next(i for i in range(n) if saved[i] != current[i])
