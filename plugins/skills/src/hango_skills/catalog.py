"""Agent Skills folders: reading, validating and layering them, and the catalog block.

A skill is a folder holding ``SKILL.md``: YAML front matter (parsed by python-frontmatter, on
PyYAML's safe loader) and a Markdown body, plus optional ``scripts/``, ``references/`` and
``assets/`` (agentskills.io). Nothing in a skill is ever executed here: files are read as
text or listed.

Sources are read in order; a later source's skill of the same name replaces an earlier one.
A skill that breaks the format is a ``SkillProblem`` (file and field, one line) and is left
out; the others are kept.

Files are reached through hango-filesystem's path resolver when that plugin is installed
(``hango_filesystem.resolve_path``: symlinks followed, nothing outside the source folder),
and otherwise through the same rule on plain paths (``Path.resolve`` and a containment
check). Either way a skill folder or resource that points outside its source is refused.

The catalog block is a pure function of the skills' names, descriptions and locations,
sorted by name, so the same skills always give the same bytes and the prompt cache keeps
hitting. Over its token budget it degrades in fixed steps: descriptions cut to one common
length, then names only, then the tail of the list counted instead of shown.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import frontmatter
import yaml
from attrs import frozen

SKILL_FILE: Final = "SKILL.md"
#: The front-matter fields of the format; any other is a format error.
FIELDS: Final = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
NAME_MAX: Final = 64
DESCRIPTION_MAX: Final = 1024
COMPATIBILITY_MAX: Final = 500
NAME_PATTERN: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: What an ``allowed-tools`` entry may be: a tool name as hango's registry spells them.
TOOL_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: The optional folders whose files ``load_skill`` lists as the skill's resources.
RESOURCE_DIRS: Final = ("scripts", "references", "assets")
#: Resource files listed per skill at most (a skill with more says how many were left out).
MAX_RESOURCES: Final = 100
#: Characters per token of the budget's estimate (English prose and Markdown, as a rule).
CHARS_PER_TOKEN: Final = 4
#: Shortest description kept before the catalog falls back to names only.
MIN_DESCRIPTION: Final = 40

CATALOG_HEADING: Final = (
    "Skills you can load (call load_skill with a skill's name when a task matches its "
    "description; its instructions then apply until the run ends):"
)


Resolver = Callable[[Path, str], Path]


def _plain_resolve(root: Path, path: str) -> Path:
    """``path`` under ``root`` on disk, symlinks followed; ``ValueError`` outside ``root``."""
    real_root = root.resolve()
    real = (real_root / path.lstrip("/")).resolve()
    if not real.is_relative_to(real_root):
        raise ValueError(f"{path} leaves its folder {root}")
    return real


def find_resolver() -> Resolver:
    """hango-filesystem's ``resolve_path`` when it is installed, else the plain-path rule.
    Looked up when called, so the plugin is optional: never an import error here."""
    try:
        module = importlib.import_module("hango_filesystem")
    except ImportError:
        return _plain_resolve
    resolver: Resolver | None = getattr(module, "resolve_path", None)
    return resolver if resolver is not None else _plain_resolve


@frozen
class Skill:
    """One valid skill: ``location`` is where it is shown to live (``<source>/<name>/SKILL.md``
    as the source was written), ``folder`` its folder on disk, ``digest`` the SHA-256 of
    ``SKILL.md``'s bytes, ``allowed_tools`` the names of ``allowed-tools`` (None: absent)."""

    name: str
    description: str
    location: str
    folder: Path
    body: str
    digest: str
    allowed_tools: tuple[str, ...] | None = None
    license: str | None = None
    compatibility: str | None = None


@frozen
class SkillProblem:
    """Why one skill was left out: ``file`` and ``field`` (``"front matter"`` when the YAML
    itself is broken) and what is wrong."""

    file: str
    field: str
    detail: str

    def __str__(self) -> str:
        return f"skill {self.file}: {self.field}: {self.detail}; the skill is skipped"


@frozen
class Scan:
    """What a scan of the sources found: the skills by name (layered), the problems, in
    source order."""

    skills: Mapping[str, Skill]
    problems: tuple[SkillProblem, ...] = ()

    def snapshot(self) -> dict[str, str]:
        """Name -> content digest, sorted: what a run keeps of the catalog it saw."""
        return {name: self.skills[name].digest for name in sorted(self.skills)}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_skill(folder: Path, location: str, file: Path | None = None) -> Skill | SkillProblem:
    """The skill in ``folder`` (which holds ``SKILL.md``; ``file`` is that file as resolved,
    by default ``folder / SKILL.md``), or the first way it breaks the format. ``location`` is
    the file as it is named to the model and in problems."""
    try:
        raw = (file or folder / SKILL_FILE).read_bytes()
    except OSError as exc:
        return SkillProblem(location, "file", f"cannot be read ({exc.strerror or exc})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return SkillProblem(location, "file", f"is not UTF-8 (byte {exc.start})")
    if not text.lstrip("\ufeff").startswith("---"):
        return SkillProblem(location, "front matter", "missing (the file must start with ---)")
    try:
        post = frontmatter.loads(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return SkillProblem(location, "front matter", f"is not valid YAML{where}")
    meta: dict[str, Any] = dict(post.metadata)
    unknown = sorted(k for k in meta if k not in FIELDS)
    if unknown:
        return SkillProblem(
            location, str(unknown[0]), f"is not a field of the format ({', '.join(FIELDS)})"
        )
    name = meta.get("name")
    if name is None:
        return SkillProblem(location, "name", "is required")
    if not isinstance(name, str) or not name:
        return SkillProblem(location, "name", "must be a non-empty string")
    if len(name) > NAME_MAX:
        return SkillProblem(location, "name", f"has {len(name)} characters; at most {NAME_MAX}")
    if NAME_PATTERN.fullmatch(name) is None:
        return SkillProblem(
            location,
            "name",
            f"{name!r} must be lowercase letters, digits and single hyphens (no leading or "
            "trailing hyphen)",
        )
    if name != folder.name:
        return SkillProblem(location, "name", f"{name!r} differs from its folder {folder.name!r}")
    description = meta.get("description")
    if description is None:
        return SkillProblem(location, "description", "is required")
    if not isinstance(description, str) or not description.strip():
        return SkillProblem(location, "description", "must be a non-empty string")
    if len(description) > DESCRIPTION_MAX:
        return SkillProblem(
            location,
            "description",
            f"has {len(description)} characters; at most {DESCRIPTION_MAX}",
        )
    for key in ("license", "compatibility"):
        if key in meta and _text(meta[key]) is None:
            return SkillProblem(location, key, "must be a string")
    compatibility = _text(meta.get("compatibility"))
    if compatibility is not None and len(compatibility) > COMPATIBILITY_MAX:
        return SkillProblem(
            location,
            "compatibility",
            f"has {len(compatibility)} characters; at most {COMPATIBILITY_MAX}",
        )
    metadata = meta.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        return SkillProblem(location, "metadata", "must map strings to strings")
    allowed: tuple[str, ...] | None = None
    if "allowed-tools" in meta:
        value = meta["allowed-tools"]
        if isinstance(value, str):
            entries: list[Any] = value.split()
        elif isinstance(value, list):
            entries = value
        else:
            return SkillProblem(
                location, "allowed-tools", "must be a space-separated string or a list of names"
            )
        bad = [e for e in entries if not isinstance(e, str) or TOOL_PATTERN.fullmatch(e) is None]
        if bad:
            return SkillProblem(location, "allowed-tools", f"{bad[0]!r} is not a tool name")
        allowed = tuple(sorted(set(entries)))
    return Skill(
        name=name,
        description=" ".join(description.split()),
        location=location,
        folder=folder,
        body=post.content,
        digest=hashlib.sha256(raw).hexdigest(),
        allowed_tools=allowed,
        license=_text(meta.get("license")),
        compatibility=compatibility,
    )


def scan(sources: Sequence[tuple[str, Path]], resolve: Resolver | None = None) -> Scan:
    """Every skill of ``sources`` (each ``(as written, folder on disk)``), later sources
    winning by name, read through ``resolve`` (default ``find_resolver()``). A source that
    does not exist is a problem (field ``paths``); so is each broken skill, and a skill whose
    SKILL.md resolves outside its source (field ``file``). Folders are read in name order, so
    the result never depends on the directory listing's order."""
    resolve = resolve or find_resolver()
    skills: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for written, root in sources:
        if not root.is_dir():
            problems.append(SkillProblem(written, "paths", "is not a folder"))
            continue
        for folder in sorted(p for p in root.iterdir() if (p / SKILL_FILE).is_file()):
            location = f"{written.rstrip('/')}/{folder.name}/{SKILL_FILE}"
            try:
                real = resolve(root, f"{folder.name}/{SKILL_FILE}")
            except ValueError:
                problems.append(SkillProblem(location, "file", f"leaves the folder {written}"))
                continue
            found = parse_skill(folder, location, real)
            if isinstance(found, SkillProblem):
                problems.append(found)
            else:
                skills[found.name] = found
    return Scan(skills, tuple(problems))


def reread(skill: Skill, resolve: Resolver | None = None) -> Skill | SkillProblem:
    """``skill`` as its SKILL.md says now (through the resolver), or how it broke since."""
    resolve = resolve or find_resolver()
    try:
        real = resolve(skill.folder.parent, f"{skill.folder.name}/{SKILL_FILE}")
    except ValueError:
        return SkillProblem(skill.location, "file", "leaves its skill source")
    return parse_skill(skill.folder, skill.location, real)


def resources(skill: Skill, resolve: Resolver | None = None) -> tuple[list[str], int]:
    """The skill's resource files (paths relative to its folder, sorted) and how many more
    there were beyond ``MAX_RESOURCES``; a file that resolves outside the skill's folder (a
    symlink out) is left out."""
    resolve = resolve or find_resolver()
    found: list[str] = []
    for sub in RESOURCE_DIRS:
        base = skill.folder / sub
        if not base.is_dir():
            continue
        for p in base.rglob("*"):
            relative = p.relative_to(skill.folder).as_posix()
            try:
                if resolve(skill.folder, relative).is_file():
                    found.append(relative)
            except ValueError:
                continue
    found.sort()
    return found[:MAX_RESOURCES], max(0, len(found) - MAX_RESOURCES)


def estimate_tokens(text: str) -> int:
    """The budget's estimate of ``text``'s tokens: characters / ``CHARS_PER_TOKEN``, rounded
    up (no tokenizer: the budget must give the same answer for every model)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _lines(skills: Iterable[Skill], cut: int | None, names_only: bool) -> list[str]:
    out = []
    for skill in skills:
        if names_only:
            out.append(f"- {skill.name} ({skill.location})")
            continue
        description = skill.description
        if cut is not None and len(description) > cut:
            description = description[: cut - 1].rstrip() + "…"
        out.append(f"- {skill.name}: {description} ({skill.location})")
    return out


def render_catalog(skills: Mapping[str, Skill], budget_tokens: int) -> str | None:
    """The catalog block's text (None when there are no skills), within ``budget_tokens``.

    The same skills give the same text. Over budget, every description is cut to the longest
    common length that fits (at least ``MIN_DESCRIPTION`` characters), else the catalog lists
    names and locations only, else only the first names (sorted) that fit, with a last line
    counting the others (load_skill still loads any of them).
    """
    if not skills:
        return None
    ordered = [skills[name] for name in sorted(skills)]

    def text(lines: list[str]) -> str:
        return "\n".join([CATALOG_HEADING, *lines])

    full = text(_lines(ordered, None, False))
    if estimate_tokens(full) <= budget_tokens:
        return full
    longest = max(len(s.description) for s in ordered)
    low, high, best = MIN_DESCRIPTION, longest - 1, None
    while low <= high:  # the longest common cut that fits: fewer cuts keep more meaning
        mid = (low + high) // 2
        if estimate_tokens(text(_lines(ordered, mid, False))) <= budget_tokens:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    if best is not None:
        return text(_lines(ordered, best, False))
    names = _lines(ordered, None, True)
    if estimate_tokens(text(names)) <= budget_tokens:
        return text(names)
    for keep in range(len(names) - 1, -1, -1):
        rest = len(names) - keep
        lines = [
            *names[:keep],
            f"- ... and {rest} more skills (load_skill loads any skill by name)",
        ]
        if estimate_tokens(text(lines)) <= budget_tokens or keep == 0:
            return text(lines)
    raise AssertionError("unreachable: keep == 0 always returns")
