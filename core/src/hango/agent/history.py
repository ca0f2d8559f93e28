"""The history as it is sent, kept up to date as the run's history changes.

What is sent is always a request a strict provider accepts: an assistant message with no
content (an empty end_turn, which real models return) stays in the history, as the record of
what the model said, but is never sent back, and neither is a blank text block (Anthropic:
"all messages must have non-empty content"). The user messages around a dropped assistant
message are merged by the provider.

Rebuilding that view on every model call costs a pass over the whole history, so a turn of a
long session would cost more than a turn of a short one. ``Sendable`` instead remembers, for
each message of the history it has seen, the message it sends (or none), and on each call
looks only at what changed since: the messages appended, and the last one when it was replaced
(a batch's results are added to one user message). The loop owns the history while it runs:
middlewares edit it before the run (a run hook, e.g. repair) or per call in the request (a
model wrapper), never in place mid-run. So an identity check of the last few messages it kept
catches every change a run makes; a shorter history or a new list is rebuilt from the first
message that differs.
"""

from __future__ import annotations

from hango.provider.messages import Message, TextBlock

#: How many of the last seen messages are checked by identity on every call: the loop only
#: ever replaces the last one, so a short tail catches every edit it makes, cheaply.
_TAIL = 4


class Sendable:
    """The sendable view of one history list (``messages``); ``view()`` is cheap per call."""

    __slots__ = ("_out", "_seen", "_source", "_tuple")

    def __init__(self, messages: list[Message]) -> None:
        self._source = messages
        self._seen: list[Message] = []  # the history messages handled, by position
        self._out: list[Message | None] = []  # what each of them is sent as (None: dropped)
        self._tuple: tuple[Message, ...] | None = None

    def view(self, messages: list[Message] | None = None) -> tuple[Message, ...]:
        """The sendable messages of ``messages`` (default: the list given at construction).

        Work per call is proportional to what changed since the previous call (plus a check
        of the last few messages), not to the length of the history; a new list, or one whose
        kept messages are no longer the same objects, is rebuilt from the first difference.
        """
        if messages is not None and messages is not self._source:
            self._source = messages
            self._forget(0)
        source = self._source
        start = self._first_changed(source)
        if start < len(self._seen):
            self._forget(start)
        if start == len(source) and self._tuple is not None:
            return self._tuple
        for m in source[len(self._seen) :]:
            self._seen.append(m)
            self._out.append(_sendable(m))
        self._tuple = tuple(m for m in self._out if m is not None)
        return self._tuple

    def _first_changed(self, source: list[Message]) -> int:
        seen = self._seen
        n = min(len(seen), len(source))
        if n < len(seen):
            # Shortened: an edit somewhere; find it.
            return next((i for i in range(n) if source[i] is not seen[i]), n)
        for i in range(n - 1, max(n - _TAIL, 0) - 1, -1):
            if source[i] is not seen[i]:
                # An edit in the tail: the first differing message may be earlier still.
                return next(j for j in range(n) if source[j] is not seen[j])
        return n

    def _forget(self, start: int) -> None:
        del self._seen[start:]
        del self._out[start:]
        self._tuple = None


def _sendable(m: Message) -> Message | None:
    """``m`` without blank text blocks, or None when nothing is left. An untouched message is
    sent as the same object."""
    if any(_blank(b) for b in m.content):
        m = Message(m.role, tuple(b for b in m.content if not _blank(b)))
    return m if m.content else None


def _blank(block: object) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def sendable(messages: list[Message]) -> tuple[Message, ...]:
    """The sendable messages of ``messages``, built in one pass (see ``Sendable``)."""
    return Sendable(messages).view()
