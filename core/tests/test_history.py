"""The sendable history is kept up to date as the history changes, not rebuilt per model call:
it always equals a full rebuild, and the work of one call is what changed since the last."""

from __future__ import annotations

import pytest

from hango import Message, TextBlock, ToolResultBlock, ToolUseBlock
from hango.agent import history
from hango.agent.history import Sendable, sendable


def full(messages: list[Message]) -> tuple[Message, ...]:
    """The reference: every message, blank text dropped, empty messages dropped."""
    out = []
    for m in messages:
        blocks = tuple(
            b for b in m.content if not (isinstance(b, TextBlock) and not b.text.strip())
        )
        if blocks:
            out.append(Message(m.role, blocks))
    return tuple(out)


def turn(i: int) -> list[Message]:
    return [
        Message("assistant", (TextBlock(" "), ToolUseBlock(f"t{i}", "x", {}))),
        Message("user", (ToolResultBlock(f"t{i}", "ok"),)),
    ]


def test_the_view_equals_a_full_rebuild_through_every_kind_of_change() -> None:
    messages = [Message.user("hi"), Message("assistant", ())]
    view = Sendable(messages)
    assert view.view() == full(messages)
    messages += turn(1)
    assert view.view() == full(messages)
    # The loop replaces the last message when a batch's next result arrives.
    messages[-1] = Message("user", (ToolResultBlock("t1", "ok"), ToolResultBlock("t2", "ok")))
    assert view.view() == full(messages)
    # An edit before the tail (a repair) and a shorter history are rebuilt from there.
    messages += turn(2) + turn(3) + turn(4)
    assert view.view() == full(messages)
    messages[1:3] = [Message("assistant", (TextBlock("said"),))]
    assert view.view() == full(messages)
    del messages[-3:]
    assert view.view() == full(messages)
    # A new list (assigned to State.messages) is rebuilt whole.
    other = [Message.user("again"), *turn(9)]
    assert view.view(other) == full(other)
    assert sendable(other) == full(other)


def test_untouched_messages_are_sent_as_the_same_objects() -> None:
    messages = [Message.user("hi"), *turn(1)]
    sent = Sendable(messages).view()
    assert sent[0] is messages[0] and sent[2] is messages[2]
    assert sent[1] is not messages[1]  # its blank text block was dropped


def test_one_call_costs_what_changed_not_the_length_of_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handled: list[Message] = []
    real = history._sendable

    def counting(m: Message) -> Message | None:
        handled.append(m)
        return real(m)

    monkeypatch.setattr(history, "_sendable", counting)
    messages = [Message.user("hi")]
    view = Sendable(messages)
    for i in range(1000):
        messages += turn(i)
        view.view()
    assert len(handled) == 1 + 2000  # every message once, never again
    handled.clear()
    messages += turn(1000)
    view.view()
    assert len(handled) == 2  # turn 1001 handles its two messages, as turn 2 did
    handled.clear()
    view.view()
    assert handled == []  # nothing changed: the same tuple
