"""``StateEncoder``: the text it saves is ``dump_state``'s document, and it encodes again only
what changed (values and, for small objects, their parts)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hango.agent.state as state_module
from hango.agent.state import StateEncoder, StateError, Todo, dump_state
from hango.store.base import storable_json
from hango.testing import new_state


def as_stored(doc: Any) -> str:
    return storable_json(doc, "state")


def test_the_text_is_the_document_dump_state_makes() -> None:
    state = new_state()
    state.todos = [Todo("plan «ünïcode»", "in_progress")]
    state.private = {
        "a": {"counts": {"k1": 1, "k2": 2}, "settled": {"k0": 5}},
        "b": [1, 2.5, None, True, "x"],
        "c": {f"key{i}": i for i in range(40)},  # more keys than parts: encoded whole
        "d": (1, 2),  # a tuple: stored as a list, as json_value does
    }
    encoder = StateEncoder()
    text = encoder.encode(state)
    assert text == as_stored(dump_state(state))
    assert json.loads(str(text)) == dump_state(state)


def test_only_what_changed_is_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real = state_module._text

    def counting(value: Any) -> str | None:
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(state_module, "_text", counting)
    state = new_state()
    big = {f"k{i}": i for i in range(1000)}
    state.private = {"repeat_call": {"counts": {"x": 1}, "settled": big}, "other": [1]}
    encoder = StateEncoder()
    encoder.encode(state)
    assert len(encoded) == 3  # counts, settled, other
    encoded.clear()
    assert encoder.encode(state) == as_stored(dump_state(state))
    assert encoded == []  # nothing changed: nothing encoded
    state.private["repeat_call"] = {"counts": {"x": 1, "y": 1}, "settled": big}
    assert encoder.encode(state) == as_stored(dump_state(state))
    assert encoded == [{"x": 1, "y": 1}]  # the small part only, never the big one


def test_a_value_that_is_not_json_fails_as_dump_state_does() -> None:
    state = new_state()
    state.private["sloppy"] = {"tags": {"a"}}
    with pytest.raises(StateError, match=r"'sloppy' cannot be stored at \$\.tags: set"):
        StateEncoder().encode(state)
    state.private["sloppy"] = {"by_id": {7: "x"}}  # json would turn 7 into "7" silently
    with pytest.raises(StateError, match=r"dict key 7 \(int\) is not a string"):
        StateEncoder().encode(state)


def test_a_non_finite_number_fails_naming_the_middleware_and_path() -> None:
    state = new_state()
    state.private["n"] = {"ratio": float("nan")}
    with pytest.raises(StateError, match="nan is not a JSON number"):
        StateEncoder().encode(state)
