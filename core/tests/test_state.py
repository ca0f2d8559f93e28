"""Typed private state: round trip, missing keys, malformed values."""

from __future__ import annotations

import enum
import json
import uuid

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango import StateError
from hango.agent.state import STATE_VERSION, dump_state, load_run_state, load_state, new_run_state
from hango.middleware import State, Todo, load_private, store_private
from hango.testing import new_state


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


# -- issue "Run integrity", items 9 and 10: state that cannot lie --------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.define
class Rich:
    tags: set[str] = attrs.Factory(set)
    seen: frozenset[int] = frozenset()
    pair: tuple[int, str] = (0, "")
    color: Color = Color.RED
    level: Level = Level.LOW
    by_color: dict[Color, int] = attrs.Factory(dict)


def through_the_store(state: State) -> State:
    """What a resumed run gets back: the state document as JSON text, then parsed."""
    return load_state(json.loads(json.dumps(dump_state(state), allow_nan=False)))


def test_sets_frozensets_tuples_and_enums_round_trip() -> None:
    value = Rich({"b", "a"}, frozenset({3, 1}), (7, "x"), Color.BLUE, Level.HIGH, {Color.RED: 2})
    state = new_state()
    store_private(state, "rich", value)
    assert state.private["rich"]["tags"] == ["a", "b"]  # sorted: equal sets store alike
    loaded, found = load_private(through_the_store(state), "rich", Rich)
    assert found and loaded == value
    assert type(loaded.level) is Level and type(loaded.color) is Color


@pytest.mark.parametrize(
    ("value", "path", "detail"),
    [
        ({"grid": {(0, 1): "x"}}, "$.grid", "dict key (0, 1) (tuple) is not a string"),
        ({"by_id": {7: "x"}}, "$.by_id", "dict key 7 (int) is not a string"),
        ({"when": [object()]}, "$.when[0]", "is not a JSON value"),
        ({"ratio": float("nan")}, "$.ratio", "nan is not a JSON number"),
    ],
)
def test_what_json_cannot_hold_fails_when_stored_naming_middleware_and_path(
    value: object, path: str, detail: str
) -> None:
    state = new_state()
    with pytest.raises(StateError) as info:
        store_private(state, "grid_keeper", value)
    assert info.value.middleware == "grid_keeper" and info.value.path == path
    assert detail in info.value.detail
    assert str(info.value).startswith(
        f"state of middleware 'grid_keeper' cannot be stored at {path}"
    )
    assert "grid_keeper" not in state.private


def test_a_loaded_value_shares_nothing_with_what_is_stored() -> None:
    state = new_state()
    store_private(state, "notes", {"items": [1, 2]})
    loaded, _ = load_private(state, "notes", dict)
    loaded["items"].append({"a", "set"})  # would not be JSON, and was never stored
    assert state.private["notes"] == {"items": [1, 2]}
    json.dumps(dump_state(state))


def test_a_private_value_written_around_store_private_never_reaches_a_checkpoint() -> None:
    state = new_state()
    state.private["sloppy"] = {"tags": {"a"}}
    with pytest.raises(StateError, match=r"'sloppy' cannot be stored at \$\.tags: set"):
        dump_state(state)


@pytest.mark.parametrize(
    ("raw", "path", "detail"),
    [
        ("garbage", "$", "expected an object, got str 'garbage'"),
        (["a"], "$", "expected an object, got list"),
        ({"counts": "garbage"}, "$.counts", "expected an object, got str"),
        ({"counts": {"k": "3"}}, "$.counts['k']", "expected an integer, got str '3'"),
        ({"counts": {"k": 2.9}}, "$.counts['k']", "expected an integer, got float 2.9"),
        ({"counts": {"k": True}}, "$.counts['k']", "expected an integer, got bool True"),
    ],
)
def test_a_malformed_value_is_never_reset_or_coerced(raw: object, path: str, detail: str) -> None:
    state = new_state()
    state.private["repeat_call"] = raw
    with pytest.raises(StateError) as info:
        load_private(state, "repeat_call", Counts)
    assert (info.value.middleware, info.value.path) == ("repeat_call", path)
    assert info.value.detail.startswith(detail)


def test_a_version_without_an_upgrade_path_is_one_line() -> None:
    doc = dump_state(new_state())
    doc["version"] = 0
    with pytest.raises(StateError) as info:
        load_state(doc)
    assert str(info.value) == (
        "run state (state_json) is malformed at $.version: 0 has no upgrade path "
        f"(this hango reads versions 1 to {STATE_VERSION})"
    )


@pytest.mark.parametrize("field_name", ["run_id", "session_id", "tenant_id"])
def test_a_document_naming_another_row_is_refused(field_name: str) -> None:
    state = new_state()
    ids = {"run_id": state.run_id, "session_id": state.session_id, "tenant_id": state.tenant_id}
    assert load_run_state(dump_state(state), **ids).run_id == state.run_id
    ids[field_name] = uuid.uuid4()
    with pytest.raises(StateError) as info:
        load_run_state(dump_state(state), **ids)
    assert info.value.path == f"$.{field_name}"
    assert f"is not this row's {field_name}" in str(info.value)


def test_a_new_run_keeps_the_plan_and_session_scoped_state_only() -> None:
    before = new_state()
    before.todos = [Todo("read", "completed"), Todo("write", "in_progress")]
    store_private(before, "memory", {"notes": ["likes tea"]})
    store_private(before, "repeat_call", Counts({"k": 2}))
    after = new_run_state(
        dump_state(before),
        run_id=uuid.uuid4(),
        session_id=before.session_id,
        agent_id=before.agent_id,
        tenant_id=before.tenant_id,
        session_scoped={"memory"},
    )
    assert after.todos == before.todos
    assert after.private == {"memory": {"notes": ["likes tea"]}}
    assert after.usage == type(after.usage)()
    first = new_run_state(
        None,
        run_id=uuid.uuid4(),
        session_id=before.session_id,
        agent_id=before.agent_id,
        tenant_id=before.tenant_id,
    )
    assert first.todos == [] and first.private == {}
