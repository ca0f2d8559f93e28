"""Permission rules on workspace paths: ``{paths, operations, mode}``, first match wins.

``paths`` are glob patterns on virtual paths (``src/**``, ``/secrets/*``, ``**/*.env``; a
leading ``/`` is optional), ``operations`` any of ``read`` (ls, read_file, glob, grep),
``write`` (write_file, edit_file) and ``delete`` (delete_file), ``mode`` one of ``allow``,
``deny`` and ``interrupt`` (ask a person through hango's durable approval). A path no rule
matches is allowed. A read-only folder is a ``deny`` rule on ``write`` and ``delete``.

A path is checked twice: as asked and as resolved (symlinks followed). The stricter answer
wins, so a symlinked folder cannot carry a denied path past its rule (deepagentsjs#633), and a
link to an allowed file does not open a denied one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from attrs import frozen
from wcmatch import glob

from hango.middleware import ConfigError

Operation = Literal["read", "write", "delete"]
Mode = Literal["allow", "deny", "interrupt"]
OPERATIONS: Final[tuple[Operation, ...]] = ("read", "write", "delete")
MODES: Final[tuple[Mode, ...]] = ("allow", "deny", "interrupt")
_STRICTNESS: Final[dict[Mode, int]] = {"allow": 0, "interrupt": 1, "deny": 2}
#: Glob flags: ``**`` crosses folders, ``*`` matches dot files, ``{a,b}`` alternatives.
GLOB_FLAGS: Final = glob.GLOBSTAR | glob.DOTGLOB | glob.BRACE

RULE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "operations": {
            "type": "array",
            "items": {"enum": list(OPERATIONS)},
            "minItems": 1,
            "uniqueItems": True,
        },
        "mode": {"enum": list(MODES)},
    },
    "required": ["paths", "mode"],
    "additionalProperties": False,
}


def matches(vpath: str, pattern: str) -> bool:
    """Whether virtual path ``vpath`` matches glob ``pattern``; a pattern ending in ``/**``
    also matches the folder itself."""
    rel = vpath.lstrip("/")
    pat = pattern.lstrip("/")
    if glob.globmatch(rel, pat, flags=GLOB_FLAGS):
        return True
    return pat.endswith("/**") and rel == pat[:-3]


@frozen
class Rule:
    """One rule: ``paths`` (glob patterns), ``operations``, ``mode``; ``label`` names it in
    error results (``permissions[2]``)."""

    paths: tuple[str, ...]
    operations: tuple[Operation, ...]
    mode: Mode
    label: str = "a rule"

    def applies(self, operation: Operation, vpath: str) -> bool:
        return operation in self.operations and any(matches(vpath, p) for p in self.paths)


@frozen
class Verdict:
    """What the rules say about one operation: ``mode`` and the rule that decided (None when
    no rule matched), described for an error result."""

    mode: Mode
    rule: str | None = None


def parse_rules(raw: Sequence[Mapping[str, Any]], *, source: str) -> tuple[Rule, ...]:
    """``[options.filesystem] permissions`` as rules. Raises ``ConfigError`` naming
    ``source`` and the rule for a pattern with a ``..`` name (it could never match a
    normalized path, so it would silently allow)."""
    rules: list[Rule] = []
    for i, entry in enumerate(raw):
        paths = tuple(str(p) for p in entry["paths"])
        for p in paths:
            if ".." in p.split("/"):
                raise ConfigError(
                    f"{source}: permissions[{i}].paths: pattern {p!r} has a '..' name; "
                    "patterns match normalized workspace paths, which never do"
                )
        operations = tuple(entry.get("operations", OPERATIONS))
        rules.append(Rule(paths, operations, entry["mode"], f"permissions[{i}]"))
    return tuple(rules)


def check(rules: Sequence[Rule], operation: Operation, *vpaths: str) -> Verdict:
    """The verdict for ``operation`` on a path known by ``vpaths`` (as asked, as resolved):
    for each, the first rule that applies; the strictest of those."""
    verdict = Verdict("allow")
    for vpath in dict.fromkeys(vpaths):
        for rule in rules:
            if rule.applies(operation, vpath):
                if _STRICTNESS[rule.mode] > _STRICTNESS[verdict.mode]:
                    verdict = Verdict(
                        rule.mode, f"{rule.label} ({rule.mode} {operation} on {vpath})"
                    )
                break
    return verdict
