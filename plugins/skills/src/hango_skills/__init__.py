"""hango-skills: Agent Skills for hango agents (slot ``skills``, the first of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``skills``. Settings: the agent file's
``[options.skills]`` table, key by key over the ``HANGO_SKILLS_*`` defaults::

    [options.skills]
    paths = ["skills", "~/team-skills"]  # folders of skill folders, later ones win by name;
                                         # HANGO_SKILLS_PATHS (os.pathsep-separated)
    catalog_tokens = 4000                # the catalog block's budget (estimated tokens);
                                         # HANGO_SKILLS_CATALOG_TOKENS (default 4000)

Relative paths resolve against the agent file's folder. An agent without skills, or whose
``tool_allowlist`` leaves ``load_skill`` out, is shown neither the catalog nor the tool (a
catalog of skills it cannot load would only cost prompt tokens); the middleware stays in its
slot, so every agent's stack lists the same slots.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from hango.middleware import StackConfig, hookimpl, int_setting
from hango_skills.catalog import (
    Scan,
    Skill,
    SkillProblem,
    estimate_tokens,
    parse_skill,
    render_catalog,
    scan,
)
from hango_skills.middleware import (
    SKILL_SKIPPED,
    TOOL_NAME,
    ActiveSkill,
    LoadSkill,
    SkillsMiddleware,
    SkillsState,
    SkillWarning,
)

__all__ = [
    "OPTIONS_SCHEMA",
    "SKILL_SKIPPED",
    "TOOL_NAME",
    "ActiveSkill",
    "LoadSkill",
    "Scan",
    "Skill",
    "SkillProblem",
    "SkillWarning",
    "SkillsMiddleware",
    "SkillsState",
    "estimate_tokens",
    "hango_middleware",
    "hango_options_schema",
    "parse_skill",
    "render_catalog",
    "scan",
]

#: The smallest catalog budget: the heading and a few names.
MIN_CATALOG_TOKENS: Final = 50
DEFAULT_CATALOG_TOKENS: Final = 4000

#: JSON Schema of ``[options.skills]``.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "paths": {
            "description": "folders holding one folder per skill, in layer order (a later "
            "folder's skill of the same name wins); relative to the agent file",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        },
        "catalog_tokens": {
            "description": "budget of the catalog block in estimated tokens (characters / 4)",
            "type": "integer",
            "minimum": MIN_CATALOG_TOKENS,
        },
    },
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {SkillsMiddleware.name: OPTIONS_SCHEMA}


def _resolve(written: str, base_dir: str | None) -> Path:
    path = Path(written).expanduser()
    if path.is_absolute() or base_dir is None:
        return path
    return Path(base_dir) / path


@hookimpl
def hango_middleware(config: StackConfig) -> SkillsMiddleware:
    """The skills middleware for the agent's sources (no sources when its allowlist leaves
    ``load_skill`` out). Raises ``ConfigError`` naming ``HANGO_SKILLS_CATALOG_TOKENS`` when
    it is not an integer of at least 50."""
    table = config.options(SkillsMiddleware.name)
    if "paths" in table:
        written = list(table["paths"])
    else:
        raw = config.settings.get("HANGO_SKILLS_PATHS", "")
        written = [p for p in raw.split(os.pathsep) if p]
    tokens = table.get("catalog_tokens")
    if tokens is None:
        tokens = int_setting(
            config.settings,
            "HANGO_SKILLS_CATALOG_TOKENS",
            DEFAULT_CATALOG_TOKENS,
            minimum=MIN_CATALOG_TOKENS,
        )
    allowlist = config.tool_allowlist
    if allowlist is not None and TOOL_NAME not in allowlist:
        written = []
    sources = [(w, _resolve(w, config.base_dir)) for w in written]
    return SkillsMiddleware(sources, catalog_tokens=tokens)
