"""docs/reference is checked against the code, so it cannot go stale: every agent-file key,
every key of every plugin's ``[options.*]`` schema, every ``STACK_ORDER`` slot (in order),
every ``StackConfig`` field, every hook, every command and option of the ``hango`` command and
every field of every run event appears in its page, and each of those tables names nothing the
code lacks."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import click
import pytest

from hango import hookspecs
from hango.agent.definition import AGENT_SCHEMA
from hango.agent.events import Event
from hango.agent.stack import STACK_ORDER
from hango.cli import main
from hango.cli.jsonl import event_type
from hango.config import StackConfig
from hango.plugins import make_plugin_manager

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"
ROW_KEY = re.compile(r"^\| `([^`]+)`", re.M)


def page(name: str) -> str:
    return (REFERENCE / name).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under the heading line ``heading`` up to the next heading of its level or
    higher. Raises ``AssertionError`` naming a missing heading."""
    level = heading.split(" ", 1)[0]
    lines = text.split("\n")
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading) + 1
    out = []
    for line in lines[start:]:
        marks = line.split(" ", 1)[0]
        if set(marks) == {"#"} and len(marks) <= len(level):
            break
        out.append(line)
    return "\n".join(out)


def first_table(text: str) -> list[str]:
    """The first-column keys (in backticks) of the first table in ``text``, in order."""
    match = re.search(r"^\|.*\|\n\|[-| ]+\|\n((?:\|.*\|\n?)+)", text, re.M)
    assert match, "no table"
    return ROW_KEY.findall(match.group(1))


# -- agent files and [options.*] ------------------------------------------------------------


def test_every_agent_file_key_is_a_row_and_every_row_a_key() -> None:
    rows = first_table(section(page("agent-file.md"), "## Keys"))
    assert sorted(rows) == sorted(AGENT_SCHEMA["properties"])


def option_schemas() -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for answer in make_plugin_manager(env={}).hook.hango_options_schema():
        schemas.update(answer or {})
    return schemas


def keys_of(schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Each property of ``schema`` as ``name``, and each property of an object-valued one as
    ``name.sub`` (limits' ``run.model_calls``): the keys a table row can name."""
    for name, sub in schema.get("properties", {}).items():
        yield prefix + name
        if isinstance(sub, dict) and "properties" in sub:
            yield from keys_of(sub, prefix + name + ".")


@pytest.mark.parametrize("middleware", sorted(option_schemas()))
def test_every_options_table_key_is_in_the_reference(middleware: str) -> None:
    text = section(page("agent-file.md"), "## `[options.*]` tables")
    match = re.search(rf"^`\[options\.{middleware}\]`.*?\n\n(\|.*?)(?:\n\n|\Z)", text, re.S | re.M)
    assert match, f"agent-file.md has no table of [options.{middleware}]"
    table = match.group(1)
    documented = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, re.M):
        documented.update(re.findall(r"`([^`]+)`", cell))
    schema = option_schemas()[middleware]
    for key in keys_of(schema):
        top = key.split(".")[0]
        prefix = key.rsplit(".", 1)[0] + ".*" if "." in key else key
        assert (
            key in documented
            or prefix in documented
            or top + ".*" in documented
            or any(d.startswith(key + ".") for d in documented)
        ), f"[options.{middleware}] key {key} is not in agent-file.md"
    known = set(keys_of(schema))
    for cell_key in documented:
        base = cell_key.removesuffix(".*").split(".NAME")[0]
        assert base in known or base.split(".")[0] in known, (
            f"agent-file.md documents [options.{middleware}] key {cell_key}, which its schema lacks"
        )


# -- the stack ------------------------------------------------------------------------------


def test_the_stack_order_table_lists_every_slot_in_order() -> None:
    assert first_table(section(page("stack.md"), "## `STACK_ORDER`")) == list(STACK_ORDER)


def test_every_stack_config_field_is_a_row_and_every_row_a_field() -> None:
    rows = first_table(section(page("stack.md"), "## `StackConfig`"))
    assert rows == [f.name for f in attrs.fields(StackConfig)]


# -- hooks ----------------------------------------------------------------------------------


def test_every_hook_has_a_section_and_every_section_is_a_hook() -> None:
    hooks = sorted(name for name in vars(hookspecs) if name.startswith("hango_"))
    sections = re.findall(r"^## `(hango_\w+)\(", page("hooks.md"), re.M)
    assert sorted(sections) == hooks


# -- the hango command ----------------------------------------------------------------------


def commands(group: click.Command, path: tuple[str, ...] = ("hango",)) -> Iterator[Any]:
    if len(path) > 1:
        yield " ".join(path), group
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            yield from commands(command, (*path, name))


COMMANDS = dict(commands(main))


def test_every_command_has_a_section_and_every_section_is_a_command() -> None:
    sections = re.findall(r"^### `(hango [^`]+)`$", page("cli.md"), re.M)
    assert sorted(sections) == sorted(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_option_and_argument_of_a_command_is_in_its_section(path: str) -> None:
    text = section(page("cli.md"), f"### `{path}`")
    command = COMMANDS[path]
    flags = set(re.findall(r"^\| `(--?[\w-]+)`", text, re.M))
    expected = set()
    for param in command.params:
        if isinstance(param, click.Option):
            expected.add(next(o for o in param.opts if o.startswith("--")))
        else:
            assert param.name is not None
            assert param.name.upper() in text, f"{path}: argument {param.name.upper()} missing"
    assert flags == expected


# -- run events -----------------------------------------------------------------------------


def event_classes(union: Any = Event) -> Iterator[type]:
    for member in typing.get_args(union):
        if attrs.has(member):
            yield member
        else:
            yield from event_classes(member)


@pytest.mark.parametrize("cls", list(event_classes()), ids=lambda c: c.__name__)
def test_every_event_is_a_json_row_with_every_field(cls: type) -> None:
    text = section(page("events.md"), "## JSON (`--jsonl`)")
    kind = event_type(cls.__new__(cls))
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", text, re.M)}
    assert kind in rows, f"events.md has no row for {kind}"
    row = rows[kind]
    assert f"`{cls.__name__}`" in row
    fields = row.split("|")[3]
    named = [f for f in re.findall(r"`(\w+)`", fields) if f in {a.name for a in attrs.fields(cls)}]
    assert named == [f.name for f in attrs.fields(cls)], f"{kind}: fields {named}"


def test_every_json_row_is_an_event() -> None:
    text = section(page("events.md"), "## JSON (`--jsonl`)")
    kinds = {event_type(cls.__new__(cls)) for cls in event_classes()}
    assert set(first_table(text)) == kinds
