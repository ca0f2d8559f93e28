"""Binding a person's decisions to the open questions in a run's ``InterruptBook`` (no I/O:
``hango.run.decide`` reads the run, calls ``record_decisions`` and saves it).

Each decision is bound to one open question: named by the question's id, or by its tool call
id when that is unambiguous (the call's first question), and to the question's argument digest;
all of a request's decisions are recorded, or none. Sending a decision that is already there is
a no-op, so a double click or a retried command changes nothing; a different decision for a
question already answered is refused. A question asked about a call whose earlier question was
answered (a second gate such as limits then approval, or the same question again after a crash
left the call's outcome unknown) is ``reasked``: a decision by call id is refused for it, since
it may be the earlier decision sent again, and must name the question's id (issue "Run
integrity II", item 3).
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


def _allowed(question: PendingAction, key: str, decision: Decision) -> Decision:
    """``decision``, if ``question`` allows its type and it is for the question's arguments;
    ``DecisionRefused`` otherwise."""
    if decision.type not in question.decisions:
        raise DecisionRefused(
            f"tool call {key!r} ({question.tool}): {decision.type!r} is not allowed "
            f"here; allowed: {', '.join(question.decisions)}"
        )
    if decision.digest is not None and decision.digest != question.digest:
        raise DecisionRefused(
            f"tool call {key!r}: the decision is for arguments {decision.digest} but "
            f"the pending action is for {question.digest} (the call changed; look again)"
        )
    return decision


def record_decisions(
    book: InterruptBook, decisions: Mapping[str, Decision], *, status: str = "suspended"
) -> RecordedDecisions:
    """Bind each decision (question id or tool call id -> ``Decision``) to its open question
    in ``book`` and record it; all or nothing.

    The same decision sent again is a no-op (``unchanged``), whether its answer is still
    pending or was already used. Raises ``DecisionRefused`` for a call with no open question
    (never asked, or the run moved on), a call already decided otherwise, a decision type the
    question does not allow, or a ``digest`` other than the question's (the arguments changed).
    ``status`` is the run's: unless it is ``suspended``, only no-ops are accepted. A ``reasked``
    question is answered only by its id.
    """
    suspended = status == "suspended"
    chosen: list[tuple[PendingAction, Decision]] = []
    unchanged: list[str] = []
    for key, decision in decisions.items():
        named = [p for p in (*book.pending, *book.decided) if p.id == key]
        if named:  # the decision names its question
            asked = named[-1]
            if asked.decision is not None:
                if not _already([asked], decision):
                    raise DecisionRefused(
                        f"question {key!r} ({asked.tool} {asked.tool_call_id!r}) was "
                        f"already decided ({asked.decision.type}, {asked.decided_at}); "
                        "a decision cannot be changed"
                    )
                unchanged.append(key)
                continue
            if not suspended:
                raise DecisionRefused(
                    f"question {key!r}: the run is {status}, not waiting for a decision"
                )
            chosen.append((asked, _allowed(asked, key, decision)))
            continue
        call_id = key
        question = next(
            (p for p in book.pending if p.tool_call_id == call_id and p.decision is None), None
        )
        if question is not None and question.reasked and suspended:
            raise DecisionRefused(
                f"tool call {call_id!r} ({question.tool}) is asked again ({question.reason}) "
                "after an earlier decision about it; a decision by call id could be that one "
                f"sent again, so name the question: --{decision.type} {question.id}"
            )
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
        chosen.append((question, _allowed(question, call_id, decision)))
    stamp = now_iso()
    recorded: list[PendingAction] = []
    for question, decision in chosen:
        bound = evolve(decision, digest=question.digest)
        recorded.append(evolve(question, decision=bound, decided_at=stamp))
        book.ask(recorded[-1])
    return RecordedDecisions(tuple(recorded), tuple(unchanged), tuple(book.waiting()))
