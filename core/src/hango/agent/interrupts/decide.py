"""Binding a person's decisions to the open questions in a run's ``InterruptBook`` (no I/O:
``hango.run.decide`` reads the run, calls ``record_decisions`` and saves it).

Each decision is bound to the open question about its tool call (the call id and the argument
digest); all of a request's decisions are recorded, or none. Sending a decision that is already
there is a no-op, so a double click or a retried command changes nothing; a different decision
for a question already answered is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from attrs import evolve, frozen

from hango.agent.interrupts.records import Decision, InterruptBook, PendingAction, now_iso


class DecisionRefused(ValueError):
    """A decision cannot be recorded; nothing was. The message names the tool call and why."""


@frozen
class RecordedDecisions:
    """What ``record_decisions`` did: the pending actions it ``recorded`` a decision on, the
    call ids whose identical decision was already there (``unchanged``), and what is still
    ``waiting``."""

    recorded: tuple[PendingAction, ...]
    unchanged: tuple[str, ...]
    waiting: tuple[PendingAction, ...]


def _answers_for(actions: Iterable[PendingAction], call_id: str) -> list[PendingAction]:
    return [p for p in actions if p.tool_call_id == call_id and p.decision is not None]


def _already(entries: Iterable[PendingAction], decision: Decision) -> bool:
    return any(
        p.decision is not None
        and p.decision.same_as(decision)
        and decision.digest in (None, p.digest)
        for p in entries
    )


def record_decisions(
    book: InterruptBook, decisions: Mapping[str, Decision], *, status: str = "suspended"
) -> RecordedDecisions:
    """Bind each decision (tool call id -> ``Decision``) to the call's open question in
    ``book`` and record it; all or nothing.

    The same decision sent again is a no-op (``unchanged``), whether its answer is still
    pending or was already used. Raises ``DecisionRefused`` for a call with no open question
    (never asked, or the run moved on), a call already decided otherwise, a decision type the
    question does not allow, or a ``digest`` other than the question's (the arguments changed).
    ``status`` is the run's: unless it is ``suspended``, only no-ops are accepted.
    """
    suspended = status == "suspended"
    chosen: list[tuple[PendingAction, Decision]] = []
    unchanged: list[str] = []
    for call_id, decision in decisions.items():
        live = _answers_for(book.pending, call_id)
        if _already(live, decision):
            unchanged.append(call_id)
            continue
        question = next(
            (p for p in book.pending if p.tool_call_id == call_id and p.decision is None), None
        )
        if question is None or not suspended:
            used = _answers_for(book.decided, call_id)
            if not live and _already(used, decision):
                unchanged.append(call_id)
                continue
            earlier = live or used
            if earlier:
                last = earlier[-1].decision
                assert last is not None
                raise DecisionRefused(
                    f"tool call {call_id!r} was already decided ({last.type}, "
                    f"{earlier[-1].decided_at}); a decision cannot be changed"
                )
            if not suspended:
                raise DecisionRefused(
                    f"tool call {call_id!r}: the run is {status}, not waiting for a decision"
                )
            open_ids = ", ".join(p.tool_call_id for p in book.waiting()) or "none"
            raise DecisionRefused(
                f"tool call {call_id!r} has no pending action (waiting for: {open_ids})"
            )
        if decision.type not in question.decisions:
            raise DecisionRefused(
                f"tool call {call_id!r} ({question.tool}): {decision.type!r} is not allowed "
                f"here; allowed: {', '.join(question.decisions)}"
            )
        if decision.digest is not None and decision.digest != question.digest:
            raise DecisionRefused(
                f"tool call {call_id!r}: the decision is for arguments {decision.digest} but "
                f"the pending action is for {question.digest} (the call changed; look again)"
            )
        chosen.append((question, decision))
    stamp = now_iso()
    recorded: list[PendingAction] = []
    for question, decision in chosen:
        bound = evolve(decision, digest=question.digest)
        recorded.append(evolve(question, decision=bound, decided_at=stamp))
        book.ask(recorded[-1])
    return RecordedDecisions(tuple(recorded), tuple(unchanged), tuple(book.waiting()))
