"""``SkillsMiddleware`` (slot ``skills``, the outermost): Agent Skills with progressive disclosure.

- RunHook: every pass of a run (a new run, a resumed one) scans the sources again, so a
  skill added or removed on disk is seen by the next run of a saved session. The snapshot
  (names and content digests) goes into the run's private state.
- PromptContributor: the catalog block first (sorted, byte-stable: inside the cached prefix),
  then, while any is active, a short block listing the active skills. That second block is
  rebuilt from state on every call, so after a compaction drops the ``load_skill`` result the
  model still knows which instructions apply and can load them again.
- ToolProvider: ``load_skill(name)`` returns the skill's body once and lists its resource
  files; the skill becomes active for the rest of the run.
- A skill's ``allowed-tools`` narrows the run's tools while it is active, through
  ``hango.middleware.narrow_tools``: the ``tool_allowlist`` middleware, innermost, enforces it
  on every model call and tool call, so no middleware between them can widen it.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio.to_thread
from attrs import field, frozen

from hango import TextBlock, Tool, ToolContext, ToolResult, ToolSpec, error_result
from hango.middleware import (
    HangoWarning,
    State,
    load_private,
    narrow_tools,
    record,
    store_private,
)
from hango_skills.catalog import (
    Scan,
    Skill,
    SkillProblem,
    render_catalog,
    reread,
    resources,
    scan,
)

TOOL_NAME: Final = "load_skill"
#: The span event of a skill left out of the catalog (the reason is fixed; the warning names it).
SKILL_SKIPPED: Final = "middleware.skill_skipped"
#: Scans kept per process, by catalog digest (a run's system blocks are built from its own).
SCANS_KEPT: Final = 16

DESCRIPTION: Final = """\
Load a skill from the skills catalog in the system prompt, by its exact name. Returns the \
skill's instructions (follow them for the rest of the task) and lists its resource files, \
which you read only when the instructions call for them. A skill may narrow the tools you \
can use while it is active. Loading a skill that is already active returns its \
instructions again (after they dropped out of the conversation)."""

INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "The skill's name, as listed."}},
    "required": ["name"],
    "additionalProperties": False,
}


class SkillWarning(HangoWarning):
    """A skill breaks the Agent Skills format and was skipped (one line: file and field)."""


@frozen
class ActiveSkill:
    """A skill loaded in this run: where it lives, the digest of what was loaded, and the
    tools it narrows to (None: it does not narrow)."""

    name: str
    location: str
    digest: str
    allowed_tools: list[str] | None = None


@frozen
class SkillsState:
    """The middleware's private state (per run): ``catalog`` the snapshot of the last scan
    (name -> SHA-256 of SKILL.md), ``catalog_digest`` the digest of its catalog block's
    inputs, ``active`` the loaded skills in load order."""

    catalog: dict[str, str] = field(factory=dict)
    catalog_digest: str = ""
    active: list[ActiveSkill] = field(factory=list)


def scan_digest(found: Scan) -> str:
    """The digest of everything the catalog block is made of (names, descriptions, locations,
    contents): equal digests, equal bytes."""
    h = hashlib.sha256()
    for name in sorted(found.skills):
        skill = found.skills[name]
        for part in (name, skill.description, skill.location, skill.digest):
            h.update(part.encode())
            h.update(b"\0")
    return h.hexdigest()


def narrowed_tools(active: Sequence[ActiveSkill]) -> list[str] | None:
    """The tools the active skills leave: the union of their ``allowed-tools`` plus
    ``load_skill`` (None when no active skill declares ``allowed-tools``)."""
    declared = [a.allowed_tools for a in active if a.allowed_tools is not None]
    if not declared:
        return None
    return sorted({TOOL_NAME, *(name for names in declared for name in names)})


class SkillsMiddleware:
    """Skills from ``sources`` (``(as written, folder)`` pairs, later ones winning by name),
    the catalog within ``catalog_tokens`` (estimated tokens)."""

    name = "skills"

    def __init__(self, sources: Sequence[tuple[str, Path]], catalog_tokens: int = 4000) -> None:
        self.sources = tuple(sources)
        self.catalog_tokens = catalog_tokens
        self.tool = LoadSkill(self)
        # Content-addressed, so runs sharing this instance never see each other's catalog.
        self._scans: OrderedDict[str, Scan] = OrderedDict()

    def scan(self) -> tuple[Scan, str]:
        """Scan the sources now: what was found and its digest (kept for ``system_blocks``)."""
        found = scan(self.sources)
        digest = scan_digest(found)
        self._scans[digest] = found
        self._scans.move_to_end(digest)
        while len(self._scans) > SCANS_KEPT:
            self._scans.popitem(last=False)
        return found, digest

    def scan_of(self, state: State) -> Scan:
        """The scan this run's last pass saw (scanned again if this process no longer has it)."""
        saved, _ = load_private(state, self.name, SkillsState)
        found = self._scans.get(saved.catalog_digest)
        return found if found is not None else self.scan()[0]

    async def before_run(self, state: State) -> None:
        if not self.sources:
            return  # an agent without skill sources: no scan, no state
        found, digest = await anyio.to_thread.run_sync(self.scan)
        for problem in found.problems:
            record(SKILL_SKIPPED, middleware=self.name, reason="skill breaks the format")
            warnings.warn(str(problem), SkillWarning, stacklevel=1)
        saved, _ = load_private(state, self.name, SkillsState)
        store_private(
            state,
            self.name,
            SkillsState(catalog=found.snapshot(), catalog_digest=digest, active=saved.active),
        )
        narrow_tools(state, self.name, narrowed_tools(saved.active))

    def provide_tools(self, state: State) -> Sequence[Tool]:
        """``load_skill`` when there is a skill to load (or one is active): an agent without
        skills is shown no tool for them."""
        if not self.sources:
            return ()
        if self.scan_of(state).skills:
            return (self.tool,)
        saved, _ = load_private(state, self.name, SkillsState)
        return (self.tool,) if saved.active else ()

    def system_blocks(self, state: State) -> Sequence[TextBlock]:
        if not self.sources:
            return ()
        found = self.scan_of(state)
        blocks = []
        catalog = render_catalog(found.skills, self.catalog_tokens)
        if catalog is not None:
            blocks.append(TextBlock(catalog))
        saved, _ = load_private(state, self.name, SkillsState)
        if saved.active:
            blocks.append(TextBlock(render_active(saved, found)))
        return tuple(blocks)


def render_active(saved: SkillsState, found: Scan) -> str:
    """The active-skills block: one line per active skill, saying when it changed or
    disappeared on disk since it was loaded, and the tools the run is narrowed to."""
    lines = [
        "Active skills (their instructions, returned by load_skill, apply until the run ends; "
        "call load_skill again to re-read one):"
    ]
    for active in saved.active:
        now = found.skills.get(active.name)
        line = f"- {active.name} ({active.location})"
        if now is None:
            line += ": removed from the skill sources since it was loaded"
        elif now.digest != active.digest:
            line += ": changed on disk since it was loaded; load it again for the new version"
        lines.append(line)
    narrowed = narrowed_tools(saved.active)
    if narrowed is not None:
        lines.append(f"Tools available while these skills are active: {', '.join(narrowed)}.")
    return "\n".join(lines)


def render_loaded(skill: Skill, already: bool) -> str:
    """``load_skill``'s result: a header, the narrowing, the resource files, then the body."""
    folder = skill.location.rsplit("/", 1)[0]
    state = "is already active" if already else "is now active"
    lines = [f"Skill {skill.name} ({skill.location}) {state}."]
    if skill.allowed_tools is not None:
        names = ", ".join(sorted({TOOL_NAME, *skill.allowed_tools}))
        lines.append(f"While it is active you can use only these tools: {names}.")
    files, more = resources(skill)
    if files:
        lines.append(f"Resource files (under {folder}/; read one only when you need it):")
        lines += [f"- {folder}/{path}" for path in files]
        if more:
            lines.append(f"- ... and {more} more")
    lines += ["", "<skill-instructions>", skill.body.strip(), "</skill-instructions>"]
    return "\n".join(lines)


class LoadSkill:
    """The ``load_skill`` tool of one ``SkillsMiddleware``."""

    spec = ToolSpec(TOOL_NAME, DESCRIPTION, INPUT_SCHEMA)

    def __init__(self, owner: SkillsMiddleware) -> None:
        self.owner = owner

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Activate the skill named ``input["name"]``: its SKILL.md is read again now (what
        is returned is what is on disk), it is recorded as active (with its digest) and its
        ``allowed-tools`` narrow the run's tools. An unknown name or a skill that broke since
        the scan gives an error result and changes nothing."""
        name = input.get("name")
        owner = self.owner
        found = owner.scan_of(ctx.state)
        listed = found.skills.get(name) if isinstance(name, str) else None
        if listed is None:
            known = ", ".join(sorted(found.skills)) or "(none)"
            return error_result("No skill is named %r. The skills are: %s.", name, known)
        fresh = await anyio.to_thread.run_sync(reread, listed)
        if isinstance(fresh, SkillProblem):
            return error_result("Skill %s cannot be loaded: %s", listed.name, fresh)
        # From here to store_private nothing awaits: a concurrent load_skill in the same batch
        # cannot interleave its update of the active list with this one.
        state = ctx.state
        saved, _ = load_private(state, owner.name, SkillsState)
        already = any(a.name == fresh.name for a in saved.active)
        entry = ActiveSkill(
            fresh.name,
            fresh.location,
            fresh.digest,
            None if fresh.allowed_tools is None else list(fresh.allowed_tools),
        )
        active = [a for a in saved.active if a.name != fresh.name] + [entry]
        store_private(
            state,
            owner.name,
            SkillsState(catalog=saved.catalog, catalog_digest=saved.catalog_digest, active=active),
        )
        narrow_tools(state, owner.name, narrowed_tools(active))
        return ToolResult(render_loaded(fresh, already))
