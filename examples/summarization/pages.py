"""The tool of the summarization example: ``read_page`` returns one page of a long, made-up
maintenance log (about 1,300 characters, the same every time), so a run that reads them all
outgrows the example's small context window several times over."""

from __future__ import annotations

from hango import tool

SYSTEMS = ("pump", "valve", "sensor", "relay", "fan", "filter")


@tool
def read_page(page: int) -> str:
    """Read one page of the maintenance log.

    Args:
        page: page number, from 1.
    """
    if page < 1:
        raise ValueError("pages start at 1")
    system = SYSTEMS[page % len(SYSTEMS)]
    lines = [f"Page {page} of the maintenance log: the {system} checks."]
    for i in range(1, 13):
        lines.append(
            f"{page}.{i}: {system} unit {i} inspected; reading {(page * 37 + i * 11) % 100} "
            f"within limits; next check in {(page + i) % 9 + 1} weeks."
        )
    return "\n".join(lines)


TOOLS = [read_page]
