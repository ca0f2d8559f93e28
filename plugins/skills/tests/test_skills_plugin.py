"""hango-skills on real folders: the format (each field), layering, the re-scan on a saved
session, the catalog's byte stability and budget, load_skill, allowed-tools enforced by the
allowlist against a middleware that adds a tool, active skills after a compaction and
through a kill and resume."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import hango_skills
from hango import (
    AgentDefinition,
    Harness,
    Message,
    ModelResponse,
    RunStatus,
    TextBlock,
    Tool,
    ToolRegistry,
    tool,
)
from hango.middleware import ModelHandler, ModelRequest, StackConfig, State
from hango.plugins import make_plugin_manager
from hango.store.sqlite import SqliteRunStore
from hango.testing import (
    Killed,
    RecordingModel,
    ToolBox,
    agent_harness,
    assert_installed,
    kill_and_resume,
)
from hango_allowlist import ToolAllowlistMiddleware
from hango_skills import (
    SkillsMiddleware,
    SkillWarning,
    estimate_tokens,
    render_catalog,
    scan,
)

pytestmark = pytest.mark.anyio


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    """``root/folder/SKILL.md`` with ``front`` as its front matter."""
    where = root / folder
    where.mkdir(parents=True, exist_ok=True)
    (where / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return where


def good(root: Path, name: str, description: str = "Use it for things.", extra: str = "") -> Path:
    return write_skill(root, name, f"name: {name}\ndescription: {description}\n{extra}")


def catalog_of(request_system: Sequence[TextBlock]) -> str:
    (block,) = [b.text for b in request_system if b.text.startswith("Skills you can load")]
    return block


@tool
def search(query: str) -> str:
    """Search the notes."""
    return f"3 notes about {query}"


@tool
def publish(text: str) -> str:
    """Publish a text."""
    return f"published {len(text)} characters"


# -- the format: each field, one line naming the file and the field, the skill skipped ---------

LONG_NAME = "a" * 65

VIOLATIONS = [
    ("no-front", None, "front matter: missing"),
    ("bad-yaml", "name: [unclosed\n", "front matter: is not valid YAML at line"),
    ("no-name", "description: d\n", "name: is required"),
    ("number-name", "name: 12\ndescription: d\n", "name: must be a non-empty string"),
    (LONG_NAME, f"name: {LONG_NAME}\ndescription: d\n", "name: has 65 characters; at most 64"),
    ("Upper", "name: Upper\ndescription: d\n", "name: 'Upper' must be lowercase"),
    ("double--hyphen", "name: double--hyphen\ndescription: d\n", "single hyphens"),
    ("-lead", "name: -lead\ndescription: d\n", "single hyphens"),
    ("elsewhere", "name: other\ndescription: d\n", "name: 'other' differs from its folder"),
    ("no-description", "name: no-description\n", "description: is required"),
    ("blank-description", "name: blank-description\ndescription: ' '\n", "non-empty"),
    (
        "long-description",
        f"name: long-description\ndescription: {'d' * 1025}\n",
        "description: has 1025 characters; at most 1024",
    ),
    ("bad-license", "name: bad-license\ndescription: d\nlicense: [1]\n", "license: must be"),
    (
        "long-compat",
        f"name: long-compat\ndescription: d\ncompatibility: {'c' * 501}\n",
        "compatibility: has 501 characters; at most 500",
    ),
    (
        "bad-metadata",
        "name: bad-metadata\ndescription: d\nmetadata: {version: 2}\n",
        "metadata: must map strings to strings",
    ),
    (
        "bad-tools",
        "name: bad-tools\ndescription: d\nallowed-tools: 'Bash(git:*)'\n",
        "allowed-tools: 'Bash(git:*)' is not a tool name",
    ),
    (
        "tools-map",
        "name: tools-map\ndescription: d\nallowed-tools: {a: b}\n",
        "allowed-tools: must be a space-separated string or a list",
    ),
    ("extra-field", "name: extra-field\ndescription: d\nmodel: big\n", "model: is not a field"),
]


@pytest.mark.parametrize(
    ("folder", "front", "expected"), VIOLATIONS, ids=[v[0][:20] for v in VIOLATIONS]
)
async def test_a_skill_breaking_the_format_is_one_line_and_skipped_and_the_agent_runs(
    tmp_path: Path, folder: str, front: str | None, expected: str
) -> None:
    skills = tmp_path / "skills"
    good(skills, "fine")
    if front is None:
        (skills / folder).mkdir(parents=True)
        (skills / folder / "SKILL.md").write_text("# no front matter\n", encoding="utf-8")
    else:
        write_skill(skills, folder, front)
    model = RecordingModel([{"text": "Done."}])
    mw = SkillsMiddleware([("skills", skills)])
    async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
        with pytest.warns(SkillWarning) as caught:
            finished = await h.run(h.agent, "hi")
    assert finished.status is RunStatus.COMPLETED
    (warning,) = [str(w.message) for w in caught]
    assert warning.startswith(f"skill skills/{folder}/SKILL.md: ")
    assert expected in warning
    assert warning.endswith("the skill is skipped")
    assert "\n" not in warning
    catalog = catalog_of(model.requests[0].system)
    assert "- fine: Use it for things. (skills/fine/SKILL.md)" in catalog
    assert folder not in catalog.replace("skills/fine", "")


def test_a_valid_skill_keeps_every_optional_field(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "pdf-forms",
        "name: pdf-forms\ndescription: >\n  Fill PDF\n  forms.\nlicense: Apache-2.0\n"
        "compatibility: needs poppler\nmetadata: {author: me}\n"
        "allowed-tools: read_file search\n",
    )
    found = scan([("s", tmp_path)])
    assert found.problems == ()
    skill = found.skills["pdf-forms"]
    assert (skill.description, skill.license, skill.compatibility) == (
        "Fill PDF forms.",
        "Apache-2.0",
        "needs poppler",
    )
    assert skill.allowed_tools == ("read_file", "search")
    assert skill.body == "Do the thing."


# -- layering and the re-scan ----------------------------------------------------------------


def test_a_later_source_wins_by_name_and_a_missing_source_is_named(tmp_path: Path) -> None:
    base, team = tmp_path / "base", tmp_path / "team"
    good(base, "review", "Base review.")
    good(base, "deploy", "Base deploy.")
    good(team, "review", "Team review.")
    found = scan([("base", base), ("nowhere", tmp_path / "nowhere"), ("team", team)])
    assert {n: s.description for n, s in found.skills.items()} == {
        "deploy": "Base deploy.",
        "review": "Team review.",
    }
    assert found.skills["review"].location == "team/review/SKILL.md"
    (problem,) = found.problems
    assert str(problem) == "skill nowhere: paths: is not a folder; the skill is skipped"


async def test_the_next_run_of_a_saved_session_sees_skills_added_and_removed(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    good(skills, "alpha")
    removed = good(skills, "beta")
    model = RecordingModel([{"text": "One."}, {"text": "Two."}])
    async with agent_harness(
        tmp_path, model=model, stack=[SkillsMiddleware([("skills", skills)])]
    ) as h:
        first = await h.run(h.agent, "hi")
        run = await h.store.get_run(h.tenant_id, first.run_id)
        assert sorted(run.state["private"]["skills"]["catalog"]) == ["alpha", "beta"]
        good(skills, "gamma")
        (removed / "SKILL.md").unlink()
        second = await h.run(h.agent, "again", session_id=run.session_id)
        saved = await h.store.get_run(h.tenant_id, second.run_id)
    names = [line.split(":")[0] for line in catalog_of(model.requests[1].system).splitlines()[1:]]
    assert names == ["- alpha", "- gamma"]
    assert sorted(saved.state["private"]["skills"]["catalog"]) == ["alpha", "gamma"]


# -- the catalog: byte-stable, within its budget ---------------------------------------------


async def test_the_same_skills_give_the_same_catalog_bytes_across_runs_and_folders(
    tmp_path: Path,
) -> None:
    # The same skills written in opposite orders, in two folders of the same name.
    blocks = []
    for i, order in enumerate((["zeta", "alpha", "mid"], ["mid", "zeta", "alpha"])):
        skills = tmp_path / f"copy{i}" / "skills"
        for name in order:
            good(skills, name, f"The {name} skill.")
        model = RecordingModel([{"text": "A."}, {"text": "B."}])
        mw = SkillsMiddleware([("skills", skills)])
        async with agent_harness(tmp_path / f"copy{i}", model=model, stack=[mw]) as h:
            await h.run(h.agent, "one")
            await h.run(h.agent, "two")
        blocks += [request.system[0].text.encode() for request in model.requests]
    assert len(set(blocks)) == 1
    assert blocks[0].splitlines()[1:] == [
        b"- alpha: The alpha skill. (skills/alpha/SKILL.md)",
        b"- mid: The mid skill. (skills/mid/SKILL.md)",
        b"- zeta: The zeta skill. (skills/zeta/SKILL.md)",
    ]


def test_over_budget_the_catalog_shortens_descriptions_then_names_only_then_counts(
    tmp_path: Path,
) -> None:
    for i in range(40):
        good(tmp_path, f"skill-{i:02d}", f"Skill number {i} " + "with a long description " * 20)
    skills = scan([("s", tmp_path)]).skills
    full = render_catalog(skills, 1_000_000)
    assert full is not None and estimate_tokens(full) > 4000
    lines = []
    for budget in (4000, 500, 200):
        text = render_catalog(skills, budget)
        assert text is not None and estimate_tokens(text) <= budget
        assert text == render_catalog(skills, budget)  # deterministic
        lines.append(text.splitlines()[1:])
    shortened, names_only, counted = lines
    assert len(shortened) == 40 and all("…" in line for line in shortened)
    assert {len(line.split(": ", 1)[1].rsplit(" (", 1)[0]) for line in shortened} == {
        len(shortened[0].split(": ", 1)[1].rsplit(" (", 1)[0])
    }  # one common cut
    assert names_only[0] == "- skill-00 (s/skill-00/SKILL.md)" and len(names_only) == 40
    assert counted[-1].startswith("- ... and ") and counted[0] == names_only[0]
    kept = len(counted) - 1
    assert counted[-1] == f"- ... and {40 - kept} more skills (load_skill loads any skill by name)"


# -- load_skill, allowed-tools and the allowlist ---------------------------------------------


class Widener:
    """A middleware between skills and the allowlist that adds a tool and puts it back into
    every request it sees: the narrowing must hold anyway."""

    name = "widener"

    def provide_tools(self, state: State) -> Sequence[Tool]:
        return (publish,)

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        tools = req.request.tools
        if all(t.name != "publish" for t in tools):
            tools = (*tools, publish.spec)
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, tools=tools)))


async def test_allowed_tools_narrow_the_tools_while_active_against_a_widening_middleware(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    where = good(skills, "research", "Look things up.", "allowed-tools: search\n")
    (where / "references").mkdir()
    (where / "references" / "sources.md").write_text("- the library\n", encoding="utf-8")
    model = RecordingModel(
        [
            {"tool_calls": [{"name": "load_skill", "input": {"name": "research"}}]},
            {"tool_calls": [{"name": "publish", "input": {"text": "leak"}}]},
            {"tool_calls": [{"name": "search", "input": {"query": "vents"}}]},
            {"text": "Done."},
        ]
    )
    stack = [SkillsMiddleware([("skills", skills)]), Widener(), ToolAllowlistMiddleware(None)]
    async with agent_harness(tmp_path, model=model, stack=stack, tools=[search]) as h:
        finished = await h.run(h.agent, "research vents")
        history = [m async for m in _history(h, finished.run_id)]
    assert finished.status is RunStatus.COMPLETED
    shown = [sorted(t.name for t in r.tools) for r in model.requests]
    assert shown[0] == ["load_skill", "publish", "search"]
    assert shown[1:] == [["load_skill", "search"]] * 3
    results = [b for m in history for b in m.content if getattr(b, "tool_use_id", None)]
    loaded, refused, searched = (getattr(b, "content", "") for b in results)
    assert "Skill research (skills/research/SKILL.md) is now active." in loaded
    assert "While it is active you can use only these tools: load_skill, search." in loaded
    assert "- skills/research/references/sources.md" in loaded
    assert "<skill-instructions>\nDo the thing.\n</skill-instructions>" in loaded
    assert refused.startswith("Refused: tool 'publish' is not available now (narrowed by skills)")
    assert searched == "3 notes about vents"
    active = model.requests[1].system[1].text
    assert active.splitlines() == [
        "Active skills (their instructions, returned by load_skill, apply until the run ends; "
        "call load_skill again to re-read one):",
        "- research (skills/research/SKILL.md)",
        "Tools available while these skills are active: load_skill, search.",
    ]


async def _history(h: Any, run_id: Any) -> Any:
    run = await h.store.get_run(h.tenant_id, run_id)
    for message in await h.store.load_messages(h.tenant_id, run.session_id):
        yield message


async def test_an_unknown_skill_is_an_error_naming_the_skills(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    good(skills, "alpha")
    model = RecordingModel(
        [{"tool_calls": [{"name": "load_skill", "input": {"name": "nope"}}]}, {"text": "ok"}]
    )
    async with agent_harness(
        tmp_path, model=model, stack=[SkillsMiddleware([("skills", skills)])]
    ) as h:
        finished = await h.run(h.agent, "hi")
        history = [m async for m in _history(h, finished.run_id)]
    (result,) = [b for m in history for b in m.content if getattr(b, "tool_use_id", None)]
    assert getattr(result, "is_error", False)
    assert getattr(result, "content", "") == "No skill is named 'nope'. The skills are: alpha."
    assert len(model.requests[1].system) == 1  # nothing became active


class Compactor:
    """Stands in for summarization: every model call sees only the last user message, so the
    load_skill result is gone from what the model reads."""

    name = "compactor"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        users = [m for m in req.request.messages if m.role == "user"]
        kept = (
            (Message.user("(earlier turns summarised)"),)
            if len(users) > 1
            else req.request.messages
        )
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, messages=kept)))


async def test_active_skills_stay_listed_after_a_compaction(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    good(skills, "careful", "Be careful.")
    model = RecordingModel(
        [
            {"tool_calls": [{"name": "load_skill", "input": {"name": "careful"}}]},
            {"tool_calls": [{"name": "search", "input": {"query": "x"}}]},
            {"text": "Done."},
        ]
    )
    stack = [SkillsMiddleware([("skills", skills)]), Compactor()]
    async with agent_harness(tmp_path, model=model, stack=stack, tools=[search]) as h:
        await h.run(h.agent, "go")
    last = model.requests[-1]
    assert all("skill-instructions" not in str(m.content) for m in last.messages)
    assert last.system[1].text.splitlines()[1] == "- careful (skills/careful/SKILL.md)"


box = ToolBox()


@box.tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: found"


async def test_an_active_skill_and_its_narrowing_survive_a_kill_and_resume(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    good(skills, "lookups", "Look up terms.", "allowed-tools: [lookup]\n")
    box.kill("lookup")  # the call after load_skill ends the process, as a kill -9 would
    turns = [
        {"tool_calls": [{"name": "load_skill", "input": {"name": "lookups"}}]},
        {"tool_calls": [{"name": "lookup", "input": {"term": "vent"}}]},
        {"text": "Found."},
    ]
    models: list[RecordingModel] = []
    agent = AgentDefinition(
        name="t", model="scripted:inline", options={"skills": {"paths": [str(skills)]}}
    )

    def harness(store: SqliteRunStore) -> Harness:
        pm = make_plugin_manager(load_entrypoints=False)
        pm.register(hango_skills, name="skills")
        import hango_allowlist

        pm.register(hango_allowlist, name="allowlist")
        models.append(RecordingModel(turns))
        return Harness(
            store, model=models[-1], plugins=pm, tools=ToolRegistry([lookup, search]), settings={}
        )

    @contextlib.contextmanager
    def add_a_skill() -> Iterator[None]:
        good(skills, "added", "Added while the run was down.")  # the resume scans again
        yield

    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        seen = await kill_and_resume(
            store, harness, agent, "look up vent", killed_by=Killed, around_resume=add_a_skill
        )
    assert seen.killed.state["private"]["tool_allowlist"] == {
        "narrowed_by": {"skills": ["load_skill", "lookup"]}
    }
    assert seen.finished.status is RunStatus.COMPLETED, seen.record.error
    assert box.started.count("lookup vent") == 2 and box.completed.count("lookup vent") == 1
    resumed = models[1].requests[0]
    assert "- added: Added while the run was down." in resumed.system[0].text
    assert sorted(seen.record.state["private"]["skills"]["catalog"]) == ["added", "lookups"]
    assert sorted(t.name for t in resumed.tools) == ["load_skill", "lookup"]
    assert resumed.system[1].text.splitlines()[1] == f"- lookups ({skills}/lookups/SKILL.md)"


async def test_a_skill_changed_on_disk_after_loading_is_flagged(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    good(skills, "alpha")
    mw = SkillsMiddleware([("skills", skills)])
    model = RecordingModel(
        [{"tool_calls": [{"name": "load_skill", "input": {"name": "alpha"}}]}, {"text": "ok"}]
    )
    async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
        run = await h.start(h.agent, "hi")
        await h.execute(run.id)
        state = await h.store.get_run(h.tenant_id, run.id)
    good(skills, "alpha", "A new description.")
    from hango.agent.state import load_state

    restored = load_state(state.state)
    await mw.before_run(restored)
    (active,) = [b.text for b in mw.system_blocks(restored) if b.text.startswith("Active")]
    assert "- alpha (skills/alpha/SKILL.md): changed on disk since it was loaded" in active


# -- the plugin ------------------------------------------------------------------------------


def test_installed_through_entry_point_in_the_first_slot() -> None:
    placement = assert_installed("skills", "hango-skills", hango_skills, middleware="skills")
    assert placement.slot == 0
    assert placement.capabilities == ("run_hook", "tool_provider", "prompt_contributor")


def test_options_layer_paths_relative_to_the_agent_file(tmp_path: Path) -> None:
    config = StackConfig(
        middleware_options={"skills": {"paths": ["a", "/abs/b"], "catalog_tokens": 100}},
        base_dir=str(tmp_path),
    )
    mw = hango_skills.hango_middleware(config)
    assert mw is not None
    assert mw.sources == (("a", tmp_path / "a"), ("/abs/b", Path("/abs/b")))
    assert mw.catalog_tokens == 100
    from_env = hango_skills.hango_middleware(
        StackConfig(settings={"HANGO_SKILLS_PATHS": "x:y"}, base_dir=str(tmp_path))
    )
    assert from_env is not None and [w for w, _ in from_env.sources] == ["x", "y"]


async def test_no_skills_or_an_allowlist_without_load_skill_shows_no_catalog_and_no_tool(
    tmp_path: Path,
) -> None:
    good(tmp_path / "skills", "alpha")
    options = {"skills": {"paths": ["skills"]}}
    shut = hango_skills.hango_middleware(
        StackConfig(
            tool_allowlist=frozenset({"x"}), middleware_options=options, base_dir=str(tmp_path)
        )
    )
    assert shut.sources == ()
    for mw in (shut, SkillsMiddleware([])):
        model = RecordingModel([{"text": "ok"}])
        async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
            await h.run(h.agent, "hi")
        assert (model.requests[0].tools, model.requests[0].system) == ((), ())


def test_a_bad_budget_variable_is_refused_naming_it() -> None:
    from hango.middleware import ConfigError

    with pytest.raises(ConfigError, match="HANGO_SKILLS_CATALOG_TOKENS"):
        hango_skills.hango_middleware(StackConfig(settings={"HANGO_SKILLS_CATALOG_TOKENS": "9"}))


# -- files are read through the resolver: nothing outside a source -----------------------------


def test_a_skill_or_resource_that_points_outside_its_source_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    good(outside, "secret", "Outside the source.")
    (outside / "passwords.txt").write_text("hunter2", encoding="utf-8")
    skills = tmp_path / "skills"
    kept = good(skills, "kept", "Inside.")
    (skills / "escape").symlink_to(outside / "secret", target_is_directory=True)
    (kept / "references").mkdir()
    (kept / "references" / "ok.md").write_text("fine", encoding="utf-8")
    (kept / "references" / "leak.txt").symlink_to(outside / "passwords.txt")
    found = scan([("skills", skills)])
    assert sorted(found.skills) == ["kept"]
    (problem,) = found.problems
    assert str(problem) == (
        "skill skills/escape/SKILL.md: file: leaves the folder skills; the skill is skipped"
    )
    assert hango_skills.catalog.resources(found.skills["kept"]) == (["references/ok.md"], 0)


def test_with_hango_filesystem_installed_its_resolver_reads_the_skills(tmp_path: Path) -> None:
    import hango_filesystem
    from hango_skills.catalog import find_resolver

    assert find_resolver() is hango_filesystem.resolve_path
    calls: list[tuple[Path, str]] = []

    def spy(root: Path, path: str) -> Path:
        calls.append((root, path))
        return hango_filesystem.resolve_path(root, path)

    good(tmp_path / "skills", "alpha")
    found = scan([("skills", tmp_path / "skills")], resolve=spy)
    assert sorted(found.skills) == ["alpha"]
    assert calls == [(tmp_path / "skills", "alpha/SKILL.md")]
