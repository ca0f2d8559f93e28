"""Typed private state: round trip, missing keys, malformed values."""

from __future__ import annotations

import json
import uuid

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango import State, StateError, Todo, dump_state, load_private, load_state, store_private
from hango.agent.state import STATE_VERSION


@attrs.define
class Counts:
    counts: dict[str, int] = attrs.Factory(dict)


@attrs.frozen
class Budget:
    spent: float
    limit: float = 10.0


@attrs.define
class Seen:
    paths: list[str] = attrs.Factory(list)
    last: str | None = None


def new_state() -> State:
    return State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())


def test_three_middlewares_round_trip_through_json_text() -> None:
    state = new_state()
    state.todos = [Todo("read", "completed"), Todo("write", "in_progress")]
    store_private(state, "repeat_call", Counts({"abc": 2}))
    store_private(state, "budget", Budget(1.5))
    store_private(state, "filesystem", Seen(["/a", "/b"], "/b"))
    text = json.dumps(dump_state(state))
    again = load_state(json.loads(text))
    assert again.todos == state.todos
    assert (again.run_id, again.session_id, again.agent_id, again.tenant_id) == (
        state.run_id, state.session_id, state.agent_id, state.tenant_id,
    )  # fmt: skip
    assert load_private(again, "repeat_call", Counts) == (Counts({"abc": 2}), True)
    assert load_private(again, "budget", Budget) == (Budget(1.5), True)
    assert load_private(again, "filesystem", Seen) == (Seen(["/a", "/b"], "/b"), True)
    assert json.loads(text)["version"] == STATE_VERSION


def test_missing_key_gives_default_and_records_state_missing() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("turn"):
        value, found = load_private(new_state(), "repeat_call", Counts)
        budget, found_budget = load_private(new_state(), "budget", Budget, lambda: Budget(0.0))
    assert (value, found) == (Counts(), False)
    assert (budget, found_budget) == (Budget(0.0), False)
    (span,) = exporter.get_finished_spans()
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert events == [
        ("middleware.state_missing", {"hango.middleware.name": "repeat_call"}),
        ("middleware.state_missing", {"hango.middleware.name": "budget"}),
    ]


def test_malformed_value_names_middleware_and_path() -> None:
    state = new_state()
    state.private["repeat_call"] = {"counts": {"abc": "three"}}
    with pytest.raises(StateError) as info:
        load_private(state, "repeat_call", Counts)
    assert info.value.middleware == "repeat_call"
    assert info.value.path == "$.counts['abc']"
    assert "repeat_call" in str(info.value) and "$.counts['abc']" in str(info.value)


def test_malformed_missing_required_field() -> None:
    state = new_state()
    state.private["budget"] = {"limit": 3}
    with pytest.raises(StateError) as info:
        load_private(state, "budget", Budget)
    assert info.value.middleware == "budget" and info.value.path == "$.spent"


@pytest.mark.parametrize("value", [{"when": object()}, {"ratio": float("nan")}, [float("inf")]])
def test_store_private_rejects_what_json_cannot_hold(value: object) -> None:
    state = new_state()
    with pytest.raises(StateError, match="'weird'"):
        store_private(state, "weird", value)
    assert "weird" not in state.private


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(version=99), "$.version"),
        (lambda d: d.pop("version"), "$.version"),
        (lambda d: d.update(todos=[{"content": "x", "status": "someday"}]), "$.todos[0].status"),
        (lambda d: d.update(run_id="not-a-uuid"), "$.run_id"),
    ],
)
def test_malformed_document_is_a_state_error(mutate: object, path: str) -> None:
    doc = dump_state(new_state())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(StateError) as info:
        load_state(doc)
    assert info.value.path == path


def test_scratch_is_not_in_the_document() -> None:
    state = new_state()
    state.scratch["batch"] = {"x": 1}
    assert "scratch" not in dump_state(state)
    assert load_state(dump_state(state)).scratch == {}
