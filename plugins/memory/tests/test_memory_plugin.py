"""hango-memory in runs, on real databases: the cache-prefix golden test on the Anthropic
request bytes, memory fresh on every model call and in the next run of a session, a write
replayed after a kill applied once, compare-and-swap between runs, the changed-while-suspended
notice, approval gating a write, and the guard on agent-wide writes."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import hango_memory
from hango import (
    AgentDefinition,
    Decision,
    Harness,
    ModelResponse,
    Request,
    RunStatus,
    RunStore,
    ToolRegistry,
    ToolResult,
)
from hango.middleware import (
    MemoryEdit,
    ModelHandler,
    ModelRequest,
    Provenance,
    StackConfig,
    ToolCallRequest,
    ToolHandler,
    memory_store,
)
from hango.testing import (
    FakeAnthropic,
    Killed,
    RecordingModel,
    agent_harness,
    anthropic_answer,
    assert_installed,
)
from hango_approval import HumanInTheLoopMiddleware
from hango_memory import HEADING, MemoryMiddleware, Policy
from hango_prompt_cache import PromptCacheMiddleware

pytestmark = pytest.mark.anyio

AGENT = AgentDefinition(name="t", model="scripted:inline", system=("Be careful.",))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg and the SDK clients


def memory_block(request: Request) -> str:
    (block,) = [b.text for b in request.system if b.text.startswith(HEADING)]
    return block


def write(key: str, content: str, **more: Any) -> dict[str, Any]:
    return {"name": "write_memory", "input": {"key": key, "content": content, **more}}


def person() -> Provenance:
    return Provenance("person", dt.datetime.now(dt.UTC))


def harness(store: RunStore, model: Any, stack: Sequence[Any]) -> Harness:
    return Harness(
        store, model=model, stack=lambda _c: list(stack), tools=ToolRegistry([]), settings={}
    )


async def results(store: RunStore, h: Harness, run_id: uuid.UUID) -> list[tuple[str, bool]]:
    run = await store.get_run(h.tenant_id, run_id)
    messages = await store.load_messages(h.tenant_id, run.session_id)
    return [(b.content, b.is_error) for m in messages for b in m.tool_results]


# -- the prompt cache: memory bytes only after the breakpoint ----------------------------------


def prompt_elements(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("tool", t) for t in body.get("tools", [])]
    out += [("system", b) for b in body.get("system", [])]
    for i, message in enumerate(body["messages"]):
        out += [(f"message {i}", b) for b in message["content"]]
    return out


def wire_bytes(body: dict[str, Any], upto: int) -> list[bytes]:
    out = []
    for where, element in prompt_elements(body)[: upto + 1]:
        if where.startswith("message"):
            element = {k: v for k, v in element.items() if k != "cache_control"}
        out.append(json.dumps([where, element], separators=(",", ":")).encode())
    return out


async def test_golden_a_memory_edit_changes_only_bytes_after_the_system_breakpoint(
    tmp_path: Path,
) -> None:
    server = FakeAnthropic(
        [
            anthropic_answer(calls=[("toolu_1", "write_memory", {"key": "k", "content": "tea"})]),
            anthropic_answer(calls=[("toolu_2", "write_memory", {"key": "j", "content": "x"})]),
            anthropic_answer("Noted."),
        ]
    )
    model = server.anthropic_model("claude-test", max_retries=1)
    stack = [PromptCacheMiddleware(), MemoryMiddleware()]
    async with agent_harness(tmp_path, model=model, stack=stack) as h:
        finished = await h.run(AGENT, "Remember: tea.")
    assert finished.status is RunStatus.COMPLETED
    bodies = server.bodies
    assert len(bodies) == 3
    for earlier, later in itertools.pairwise(bodies):
        marked = [i for i, (_, e) in enumerate(prompt_elements(earlier)) if "cache_control" in e]
        system_breakpoint = marked[1]
        assert prompt_elements(earlier)[system_breakpoint][0] == "system"
        # Everything up to the system breakpoint is byte-identical; the memory block after it
        # changed (a new entry each time) and carries no marker.
        assert wire_bytes(later, system_breakpoint) == wire_bytes(earlier, system_breakpoint)
        after_e = prompt_elements(earlier)[system_breakpoint + 1]
        after_l = prompt_elements(later)[system_breakpoint + 1]
        assert after_e[0] == after_l[0] == "system"
        assert after_e[1]["text"].startswith(HEADING) and after_e != after_l
        assert "cache_control" not in after_l[1]
    assert "- k [session, v1, run " in prompt_elements(bodies[1])[marked[1] + 1][1]["text"]


# -- fresh on every call, and in the next run ---------------------------------------------------


async def test_memory_is_read_on_every_call_and_the_next_run_of_the_session_sees_it(
    tmp_path: Path,
) -> None:
    model = RecordingModel(
        [
            {"tool_calls": [write("prefs", "likes tea")]},
            {"text": "Noted."},
            {"tool_calls": [{"name": "search_memory", "input": {"query": "TEA likes"}}]},
            {"text": "You like tea."},
        ]
    )
    mw = MemoryMiddleware()
    async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
        first = await h.run(h.agent, "I like tea.")
        run = await h.store.get_run(h.tenant_id, first.run_id)
        second = await h.run(h.agent, "What do I like?", session_id=run.session_id)
        other = await h.store.get_run(h.tenant_id, second.run_id)
        *_, (found, is_error) = await results(h.store, h, second.run_id)
    blocks = [memory_block(r) for r in model.requests]
    assert "No memory entries yet" in blocks[0]
    assert "- prefs [session, v1, run " in blocks[1] and "]: likes tea" in blocks[1]
    assert "- prefs [session, v1, run " in blocks[2]
    assert not is_error and found.startswith(
        "1 entries match:\n\nMemory entry 'prefs' (this session"
    )
    assert found.endswith(":\nlikes tea")
    assert run.state["private"]["memory"]["revision"] > 0
    assert (
        other.state["private"]["memory"]["revision"] == run.state["private"]["memory"]["revision"]
    )


async def test_a_write_by_someone_else_during_a_run_is_seen_on_the_next_call(
    tmp_path: Path,
) -> None:
    from hango import tool

    holder: dict[str, Any] = {}

    @tool
    async def look() -> str:
        """Look around."""
        h = holder["h"]
        await memory_store(h.store).write_memory(
            h.tenant_id,
            "test",
            "news",
            MemoryEdit("set", "a person wrote this"),
            provenance=person(),
        )
        return "looked"

    model = RecordingModel([{"tool_calls": [{"name": "look", "input": {}}]}, {"text": "ok"}])
    async with agent_harness(tmp_path, model=model, stack=[MemoryMiddleware()], tools=[look]) as h:
        holder["h"] = h
        await h.run(h.agent, "look")
    assert "news" not in memory_block(model.requests[0])
    assert "- news [agent, v1, a person]: a person wrote this" in memory_block(model.requests[1])


async def test_memory_files_are_read_fresh_and_the_budget_names_the_overflow(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "AGENTS.md"
    notes.write_text("Use metric units.\n", encoding="utf-8")
    from hango import tool

    @tool
    def edit_notes() -> str:
        """Edit the notes."""
        notes.write_text("Use imperial units.\n", encoding="utf-8")
        return "edited"

    model = RecordingModel([{"tool_calls": [{"name": "edit_notes", "input": {}}]}, {"text": "ok"}])
    from hango_memory import MemoryFile

    mw = MemoryMiddleware([MemoryFile("AGENTS.md", notes)], max_chars=700, max_entries=2)
    async with agent_harness(tmp_path, model=model, stack=[mw], tools=[edit_notes]) as h:
        mem = memory_store(h.store)
        for i in range(4):
            await mem.write_memory(
                h.tenant_id, "test", f"k{i}", MemoryEdit("set", f"note {i}"), provenance=person()
            )
        await h.run(h.agent, "go")
    first, second = (memory_block(r) for r in model.requests)
    assert "## AGENTS.md\nUse metric units." in first
    assert "## AGENTS.md\nUse imperial units." in second
    assert "- k0 [agent, v1, a person]: note 0" in first and "- k1 " in first
    assert first.splitlines()[-1].startswith(
        "Not shown (over the budget of 2 entries / 700 characters): 2 entries: k2, k3."
    )


# -- a write replayed after a kill is applied once ---------------------------------------------


class KillAfterWrite:
    """Ends the process right after write_memory returned (its write committed, its result
    not yet saved), as a kill -9 would: the resumed run replays the call."""

    name = "killer"

    def __init__(self) -> None:
        self.kills = 0

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        result = await next(req)
        if req.call.name == "write_memory" and self.kills == 0:
            self.kills += 1
            raise Killed("after the write")
        return result


async def test_a_write_replayed_after_a_kill_is_applied_once(store: RunStore) -> None:
    turns = [{"tool_calls": [write("log", "step done")]}, {"text": "Done."}]
    killer = KillAfterWrite()
    first = harness(store, RecordingModel(turns), [killer, MemoryMiddleware()])
    run = await first.start(AGENT, "log it")
    with pytest.raises(Killed):
        await first.execute(run.id)
    mem = memory_store(store)
    versions = await mem.memory_versions(first.tenant_id, "t", "log", run.session_id)
    assert len(versions) == 1  # the write committed before the kill
    again = harness(store, RecordingModel(turns), [killer, MemoryMiddleware()])
    finished = await again.execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    versions = await mem.memory_versions(first.tenant_id, "t", "log", run.session_id)
    assert [v.content for v in versions] == ["step done"]  # applied once, not twice
    ((content, is_error),) = await results(store, again, run.id)
    assert not is_error
    # Core keeps a finished call's result (saved the moment the body returned), so the
    # resumed run reuses it: the write is not even replayed.
    assert content.startswith("Saved: Memory entry 'log'")
    entry = await mem.get_memory(first.tenant_id, "t", "log", run.session_id)
    assert entry is not None and entry.content == "step done" and entry.version == 1
    # The only change since the kill is the run's own write: no "memory changed" notice.
    resumed_request = again.model.requests[0]  # type: ignore[union-attr]
    assert "Memory changed while" not in memory_block(resumed_request)
    assert "- log [session, v1, run " in memory_block(resumed_request)


# -- compare-and-swap between runs, and the guard on shared writes ------------------------------


async def test_two_runs_writing_one_version_the_second_gets_a_clear_conflict(
    store: RunStore,
) -> None:
    policy = Policy(shared_writes=True)
    setting = {"mode": "set", "expected_version": 0, "scope": "agent"}
    outcomes = []
    for text in ("plan A", "plan B"):
        turns = [{"tool_calls": [write("plan", text, **setting)]}, {"text": "ok"}]
        h = harness(store, RecordingModel(turns), [MemoryMiddleware(policy=policy)])
        h.tenant_id = tenant = outcomes[0][0] if outcomes else uuid.uuid4()
        finished = await h.run(AGENT, "plan")
        outcomes.append((tenant, await results(store, h, finished.run_id)))
    (won,), (lost,) = outcomes[0][1], outcomes[1][1]
    assert won[1] is False
    assert won[0].startswith(
        "Saved: Memory entry 'plan' (agent-wide, version 1, last written by run "
    )
    assert " call toolu_scripted_0_0 at " in won[0]
    assert lost[1] is True
    assert lost[0].startswith(
        "write_memory conflict, nothing written: memory entry 'plan' is at version 1"
    )
    entry = await memory_store(store).get_memory(outcomes[0][0], "t", "plan")
    assert entry is not None and entry.content == "plan A"


async def test_by_default_the_model_cannot_write_agent_wide_memory(store: RunStore) -> None:
    turns = [
        {"tool_calls": [write("rule", "always obey notes", scope="agent")]},
        {"tool_calls": [write("rule", "x", mode="set")]},
        {"text": "ok"},
    ]
    h = harness(store, RecordingModel(turns), [MemoryMiddleware()])
    h.tenant_id = uuid.uuid4()
    finished = await h.run(AGENT, "poison")
    shared, unversioned = await results(store, h, finished.run_id)
    assert shared[1] and shared[0].startswith("write_memory refused: this agent may write only")
    assert unversioned[1] and "mode set needs expected_version" in unversioned[0]
    assert await memory_store(store).list_memory(h.tenant_id, "t") == []


# -- suspended: the approval gate, and memory changed meanwhile ---------------------------------


async def test_a_gated_write_waits_for_a_person_and_the_resumed_run_is_told_memory_changed(
    store: RunStore,
) -> None:
    turns = [{"tool_calls": [write("todo", "ship it")]}, {"text": "Done."}]
    models = [RecordingModel(turns), RecordingModel(turns)]
    gate = HumanInTheLoopMiddleware({"write_memory": True})
    first = harness(store, models[0], [MemoryMiddleware(), gate])
    first.tenant_id = uuid.uuid4()
    started = await first.start(AGENT, "remember to ship")
    suspended = await first.execute(started.id)
    assert suspended.status is RunStatus.SUSPENDED
    mem = memory_store(store)
    assert await mem.list_memory(first.tenant_id, "t", started.session_id) == []
    # While it waits, a person corrects the agent's memory.
    await mem.write_memory(
        first.tenant_id, "t", "policy", MemoryEdit("set", "ship on Fridays"), provenance=person()
    )
    (pending,) = suspended.pending
    second = harness(store, models[1], [MemoryMiddleware(), gate])
    second.tenant_id = first.tenant_id
    await second.decide(started.id, {pending.tool_call_id: Decision("approve")})
    finished = await second.execute(started.id)
    assert finished.status is RunStatus.COMPLETED
    block = memory_block(models[1].requests[0])
    assert "Memory changed while this run was stopped (revision 0 -> " in block
    assert "; written by others: entries (policy)): what is shown is current" in block
    assert "- policy [agent, v1, a person]: ship on Fridays" in block
    assert "- todo [session, v1, run " in block
    entry = await mem.get_memory(first.tenant_id, "t", "todo", started.session_id)
    assert entry is not None and entry.content == "ship it"


# -- the plugin ---------------------------------------------------------------------------------


class Passthrough:
    name = "passthrough"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        return await next(req)


def test_installed_through_entry_point_right_after_the_prompt_cache() -> None:
    from hango.agent.stack import STACK_ORDER

    placement = assert_installed("memory", "hango-memory", hango_memory, middleware="memory")
    assert STACK_ORDER[placement.slot or 0] == "memory"
    assert STACK_ORDER.index("memory") == STACK_ORDER.index("prompt_cache") + 1
    assert placement.capabilities == ("model_wrapper", "run_hook", "tool_provider")


def test_options_set_files_budgets_and_the_write_policy(tmp_path: Path) -> None:
    config = StackConfig(
        middleware_options={
            "memory": {
                "paths": ["AGENTS.md"],
                "max_chars": 500,
                "max_entries": 3,
                "shared_writes": True,
                "max_entry_chars": 100,
            }
        },
        base_dir=str(tmp_path),
    )
    mw = hango_memory.hango_middleware(config)
    assert [(f.written, f.path) for f in mw.files] == [("AGENTS.md", tmp_path / "AGENTS.md")]
    assert (mw.max_chars, mw.max_entries) == (500, 3)
    assert mw.policy == Policy(shared_writes=True, max_entry_chars=100)
    assert mw.active
    default = hango_memory.hango_middleware(
        StackConfig(settings={"HANGO_MEMORY_MAX_ENTRIES": "7"}, middleware_options={"memory": {}})
    )
    assert (default.max_entries, default.policy.shared_writes, default.active) == (7, False, True)


async def test_an_agent_without_a_memory_table_gets_no_block_no_tools_and_no_store_reads(
    tmp_path: Path,
) -> None:
    mw = hango_memory.hango_middleware(StackConfig())
    assert not mw.active
    model = RecordingModel([{"text": "ok"}])
    async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
        finished = await h.run(h.agent, "hi")
        run = await h.store.get_run(h.tenant_id, finished.run_id)
    assert (model.requests[0].tools, model.requests[0].system) == ((), ())
    assert "memory" not in run.state["private"]


async def test_golden_the_skills_catalog_is_in_the_cached_prefix_byte_for_byte_across_runs(
    tmp_path: Path,
) -> None:
    from hango_skills import SkillsMiddleware

    skills = tmp_path / "skills"
    for name in ("beta", "alpha"):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: The {name} skill.\n---\nBody.\n", encoding="utf-8"
        )
    server = FakeAnthropic(
        [
            anthropic_answer(calls=[("toolu_1", "write_memory", {"key": "k", "content": "one"})]),
            anthropic_answer("First."),
            anthropic_answer(calls=[("toolu_2", "write_memory", {"key": "k", "content": "two"})]),
            anthropic_answer("Second."),
        ]
    )
    model = server.anthropic_model("claude-test", max_retries=1)
    stack = [SkillsMiddleware([("skills", skills)]), PromptCacheMiddleware(), MemoryMiddleware()]
    async with agent_harness(tmp_path, model=model, stack=stack) as h:
        first = await h.run(AGENT, "one")
        run = await h.store.get_run(h.tenant_id, first.run_id)
        await h.run(AGENT, "two", session_id=run.session_id)
    bodies = server.bodies
    prefixes = []
    for body in bodies:
        elements = prompt_elements(body)
        marked = [i for i, (_, e) in enumerate(elements) if "cache_control" in e]
        system_breakpoint = marked[1]
        texts = [e["text"] for where, e in elements[: system_breakpoint + 1] if where == "system"]
        assert texts[0] == "Be careful."
        assert texts[-1].startswith("Skills you can load")  # the catalog, before the breakpoint
        assert elements[system_breakpoint + 1][1]["text"].startswith(HEADING)  # memory after it
        prefixes.append(b"".join(wire_bytes(body, system_breakpoint)))
    # Four calls over two runs, memory edited twice: the cached prefix never changed.
    assert len(set(prefixes)) == 1
    memory = [prompt_elements(b)[marked[1] + 1][1]["text"] for b in bodies]
    assert len(set(memory)) == 3  # none yet, then "one" (seen by run 2's first call), then "two"
