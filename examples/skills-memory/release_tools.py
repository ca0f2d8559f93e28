"""The example's own tools: the merged changes, and publishing (which the release-notes skill
leaves out of the tools while it is active)."""

from hango import tool


@tool
def list_changes() -> str:
    """The changes merged since the last release, one per line."""
    return "\n".join(
        [
            "feat: resume a run with --force after its process died",
            "fix: a tool result with a NUL character is stored",
            "feat!: agent files name middleware by plugin name",
        ]
    )


@tool
def publish(text: str) -> str:
    """Publish a text to the team's channel."""
    return f"published {len(text)} characters"


TOOLS = [list_changes, publish]
