"""``RepairToolCallsMiddleware`` (slot ``repair_tool_calls``): dangling tool calls.

A RunHook. Before a run (or a resumed run) makes its first model call, every assistant tool
call that has no result (the run crashed, was cancelled, or the history was edited) is
answered with a synthetic error result saying the run was interrupted, every result whose
call is missing is dropped, and a history left opening with anything but a user prompt is
trimmed to its first one (``hango_repair.history``). The model then sees a valid history and
decides itself whether to call again; an interrupted call is never re-run behind its back.

Calls the resumed run finishes itself are left alone (``hango.middleware.held_calls``): the
unfinished batch of a run suspended for a decision (it goes on with the decisions) and a call
recorded as started without a result (the loop answers that its outcome is unknown, or asks
again).

A clean history is left exactly as it is (the same list and message objects), so nothing is
rewritten; a repaired one is saved by the runner's checkpoint right after ``before_run``, which
writes only the messages that changed.
"""

from __future__ import annotations

from typing import Final

from hango.middleware import State, held_calls, record
from hango_repair.history import repair_history

#: Span event recorded when a history was repaired, with the two counts below.
HISTORY_REPAIRED: Final = "middleware.history_repaired"
RESULTS_ADDED: Final = "hango.repair.results_added"
RESULTS_DROPPED: Final = "hango.repair.results_dropped"
MESSAGES_TRIMMED: Final = "hango.repair.messages_trimmed"


class RepairToolCallsMiddleware:
    """Makes the run's history valid before its first model call."""

    name = "repair_tool_calls"

    async def before_run(self, state: State) -> None:
        repair = repair_history(state.messages, held_calls(state))
        if repair is None:
            return
        state.messages[:] = repair.messages
        record(
            HISTORY_REPAIRED,
            middleware=self.name,
            attributes={
                RESULTS_ADDED: repair.added,
                RESULTS_DROPPED: repair.dropped,
                MESSAGES_TRIMMED: repair.trimmed,
            },
        )
