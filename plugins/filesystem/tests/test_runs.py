"""The workspace in real runs: the entry point and options table, a 1 MB result offloaded and
read back in pages, kill -9 mid-write and resume (counted), a PostgreSQL run continued by
another worker reading the file the first wrote, and an ``interrupt`` rule approved."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import hango_filesystem
from hango import (
    AgentDefinition,
    ConfigError,
    Decision,
    Harness,
    Request,
    RunStatus,
    RunStore,
    ScriptedModel,
    ToolRegistry,
)
from hango.middleware import StackConfig
from hango.testing import (
    Killed,
    ToolBox,
    assert_installed,
    kill_and_resume,
    new_state,
    saved_history,
)
from hango_filesystem import FilesystemMiddleware, StoreBackend

pytestmark = pytest.mark.anyio

box = ToolBox()

ONE_MB = "".join(f"row {i:07d} " + "y" * 87 + "\n" for i in range(10_000))
assert len(ONE_MB) == 1_000_000


@box.tool
def dump() -> str:
    """Return a very large result."""
    return ONE_MB


@box.tool
def crash() -> str:
    """Stands for the process being killed."""
    return "survived"


def use(name: str, **input: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": input}]}


def agent(options: dict[str, Any] | None = None, **kw: Any) -> AgentDefinition:
    return AgentDefinition(
        name="ws",
        model="scripted:inline",
        options={"filesystem": options or {}},
        max_turns=60,
        **kw,
    )


def harness(store: RunStore, model: Any, options: dict[str, Any] | None = None) -> Harness:
    config = StackConfig(middleware_options={"filesystem": options or {}}, source="agent 'ws'")
    return Harness(
        store,
        model=model,
        stack=lambda _c: [hango_filesystem.hango_middleware(config)],
        tools=ToolRegistry([dump, crash]),
        settings={},
    )


class Pager:
    """A model that calls ``dump``, then pages through the offloaded result with read_file,
    following the offset each page ends with."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        self.requests.append(request)
        turn: dict[str, Any]
        if len(request.messages) == 1:
            turn = use("dump")
        else:
            last = request.messages[-1].content[-1]
            text = getattr(last, "content", "")
            found = re.search(r"read_file\(path='([^']+)', offset=(\d+)\)", text)
            turn = (
                use("read_file", path=found.group(1), offset=int(found.group(2)))
                if found
                else {"text": "done"}
            )
        # The scripted model picks its turn by the assistant messages so far: pad to here.
        done = sum(1 for m in request.messages if m.role == "assistant")
        async for event in ScriptedModel.from_turns([{"text": "-"}] * done + [turn]).stream(
            request
        ):
            yield event


def test_the_entry_point_and_options_table() -> None:
    assert_installed(
        "filesystem",
        "hango-filesystem",
        hango_filesystem,
        middleware="filesystem",
    )
    idle = hango_filesystem.hango_middleware(StackConfig())  # opt-in per agent
    assert not idle.active and idle.provide_tools(new_state()) == ()
    assert idle.system_blocks(new_state()) == ()
    mw = hango_filesystem.hango_middleware(StackConfig(middleware_options={"filesystem": {}}))
    assert isinstance(mw, FilesystemMiddleware) and mw.state_scope == "session"
    assert isinstance(mw.workspace.default, StoreBackend)
    with pytest.raises(ConfigError, match=r"\[options.filesystem\]: backend = 'local' needs root"):
        hango_filesystem.hango_middleware(
            StackConfig(middleware_options={"filesystem": {"backend": "local"}}, source="a.toml")
        )
    with pytest.raises(ConfigError, match=r"root = .* is not a folder"):
        hango_filesystem.hango_middleware(
            StackConfig(
                middleware_options={"filesystem": {"backend": "local", "root": "/nonexistent/x"}}
            )
        )
    with pytest.raises(ConfigError, match=r"permissions\[0\].paths: pattern '../\*\*'"):
        hango_filesystem.hango_middleware(
            StackConfig(
                middleware_options={
                    "filesystem": {"permissions": [{"paths": ["../**"], "mode": "deny"}]}
                }
            )
        )


async def test_a_1mb_result_is_offloaded_and_read_back_in_pages(
    store: RunStore, tmp_path: Path
) -> None:
    model = Pager()
    h = harness(store, model)
    finished = await h.run(agent(), "dump and read")
    assert finished.status is RunStatus.COMPLETED, finished.error
    # The request after dump carries only the preview and the path.
    after_dump = model.requests[1].messages[-1].content[0]
    preview = getattr(after_dump, "content", "")
    assert len(preview) < 5_000
    assert "/large_tool_results/" in preview
    assert "row 0000000" in preview and "row 0009999" in preview
    history = await saved_history(h, finished.run_id)
    pages = [
        b.content
        for m in history
        for b in m.content
        if getattr(b, "tool_use_id", None) and re.match(r" *\d+[ +]\t", b.content)
    ]
    assert len(pages) >= 25  # 1 MB in pages of at most 40,000 characters
    assert all(len(p) <= 41_000 for p in pages)
    back = []
    for page in pages:
        for row in page.split("\n"):
            if not row.startswith("[Rows "):
                back.append(row.partition("\t")[2])
    assert "\n".join(back) + "\n" == ONE_MB
    # Where it went is recorded with the run (hango runs show --json: state.private).
    record = await store.get_run(h.tenant_id, finished.run_id)
    (offloaded,) = record.state["private"]["filesystem"]["offloaded"]
    assert offloaded["tool"] == "dump" and offloaded["chars"] == 1_000_000


async def test_kill_9_mid_write_is_never_applied_twice(store: RunStore, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    options = {"backend": "local", "root": str(root)}
    writes: list[str] = []
    kill = [True]

    class Dying(hango_filesystem.LocalBackend):
        async def write(self, state: Any, vpath: str, data: bytes) -> None:
            writes.append(vpath)
            await super().write(state, vpath, data)
            if kill and kill.pop():
                raise Killed  # the process dies after the file changed, before the save

    turns = [
        use("write_file", path="/log.txt", content="entry\n"),
        {"text": "done"},
    ]

    def make(s: RunStore) -> Harness:
        mw = hango_filesystem.hango_middleware(
            StackConfig(middleware_options={"filesystem": options})
        )
        assert mw is not None
        mw.workspace.default = Dying(root, max_file_bytes=10**6)
        return Harness(
            s,
            model=ScriptedModel.from_turns(turns),
            stack=lambda _c: [mw],
            tools=ToolRegistry([dump, crash]),
            settings={},
        )

    killed = await kill_and_resume(store, make, agent(options), "log", killed_by=Killed)
    assert killed.killed.status is RunStatus.RUNNING
    assert killed.finished.status is RunStatus.COMPLETED, killed.finished.error
    assert writes == ["/log.txt"]  # once: the resumed run did not write again
    assert (root / "log.txt").read_text() == "entry\n"
    history = await store.load_messages(killed.run.tenant_id, killed.run.session_id)
    results = [b for m in history for b in m.content if getattr(b, "tool_use_id", None)]
    assert results[0].is_error and "Outcome unknown" in results[0].content


@pytest.mark.parametrize("store_backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_run_continued_by_another_worker_reads_the_file_the_first_wrote(
    store: RunStore,
) -> None:
    box.kill("crash")
    turns = [
        use("write_file", path="/notes/plan.md", content="step 1: store it\n"),
        use("crash"),
        use("read_file", path="/notes/plan.md"),
        {"text": "done"},
    ]
    killed = await kill_and_resume(
        store,
        lambda s: harness(s, ScriptedModel.from_turns(turns)),
        agent(),
        "remember",
        killed_by=Killed,
    )
    assert killed.finished.status is RunStatus.COMPLETED, killed.finished.error
    assert box.count("crash") == (2, 1)
    history = await store.load_messages(killed.run.tenant_id, killed.run.session_id)
    results = [b.content for m in history for b in m.content if getattr(b, "tool_use_id", None)]
    assert results[0] == "Wrote /notes/plan.md (17 bytes)."
    assert results[-1] == "     1 \tstep 1: store it"
    # A new run of the same session sees the file too (the manifest is session-scoped).
    done = sum(1 for m in history if m.role == "assistant")  # the script counts the session's
    pad: list[dict[str, Any]] = [{"text": "-"}] * done
    second = harness(
        store, ScriptedModel.from_turns([*pad, use("ls", path="/notes"), {"text": "ok"}])
    )
    again = await second.run(agent(), "list", session_id=killed.run.session_id)
    history = await store.load_messages(killed.run.tenant_id, killed.run.session_id)
    assert again.status is RunStatus.COMPLETED
    assert history[-2].content[0].content == "/notes/plan.md (17 bytes)"  # type: ignore[union-attr]


async def test_an_interrupt_rule_suspends_and_an_approval_writes(
    store: RunStore, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("DEBUG = True\n")
    options = {
        "backend": "local",
        "root": str(root),
        "permissions": [{"paths": ["src/**"], "operations": ["write"], "mode": "interrupt"}],
    }
    turns = [
        use("edit_file", path="/src/app.py", old_string="True", new_string="False"),
        {"text": "edited"},
    ]
    h = harness(store, ScriptedModel.from_turns(turns), options)
    first = await h.run(agent(options), "turn debug off")
    assert first.status is RunStatus.SUSPENDED
    (action,) = first.pending
    assert action.middleware == "filesystem" and "interrupt write on /src/app.py" in action.reason
    assert (root / "src" / "app.py").read_text() == "DEBUG = True\n"
    done = await harness(store, ScriptedModel.from_turns(turns), options).resume(
        first.run_id, decisions={action.tool_call_id: Decision.approve()}
    )
    assert done.status is RunStatus.COMPLETED, done.error
    assert (root / "src" / "app.py").read_text() == "DEBUG = False\n"
    assert json.dumps(action.input) == json.dumps(
        {"path": "/src/app.py", "old_string": "True", "new_string": "False"}
    )
