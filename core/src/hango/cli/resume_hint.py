"""The ``hango`` command line a hint shows: one that works when pasted where the user is.

After Ctrl-C or a failure the command prints how to resume the run. That line must run as is:
the same way of starting hango (``uv run hango`` under ``uv run``, else ``hango`` when it is on
the PATH, else the script's path), the same database and tenant, and the same model and output
options, quoted for a POSIX shell.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def invocation(
    env: Mapping[str, str] = os.environ, cwd: Path | None = None, prefix: str = sys.prefix
) -> list[str]:
    """How to start this hango from ``cwd``.

    Under ``uv run`` (uv sets ``UV_RUN_RECURSION_DEPTH`` and ``VIRTUAL_ENV`` for the command it
    starts) and with this interpreter in that environment: ``uv run hango`` inside the project
    that owns the environment, ``uv run --project DIR hango`` outside it. Otherwise ``hango``
    when the PATH finds this environment's script, else the script's path, else
    ``python -m hango`` with this interpreter.
    """
    here = (cwd or Path.cwd()).resolve()
    venv = env.get("VIRTUAL_ENV")
    if (
        env.get("UV_RUN_RECURSION_DEPTH")
        and venv
        and Path(venv).resolve() == Path(prefix).resolve()
    ):
        project = Path(venv).resolve().parent
        if here == project or project in here.parents:
            return ["uv", "run", "hango"]
        return ["uv", "run", "--project", str(project), "hango"]
    script = Path(prefix) / ("Scripts" if os.name == "nt" else "bin") / "hango"
    found = shutil.which("hango", path=env.get("PATH"))
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return ["hango"]
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "hango"]


def command(
    args: Sequence[str],
    *,
    db: str | None = None,
    tenant: str | None = None,
    options: Sequence[str] = (),
    env: Mapping[str, str] = os.environ,
    cwd: Path | None = None,
) -> str:
    """``hango ARGS`` as a pasteable shell line: ``HANGO_TENANT=...`` first when a tenant is
    given, ``--db URL`` when a database is, then ``options`` (already split, e.g.
    ``["--model", "openai:x"]``)."""
    words = [*invocation(env, cwd), *args]
    if db is not None:
        words += ["--db", db]
    words += options
    line = shlex.join(words)
    return f"HANGO_TENANT={shlex.quote(tenant)} {line}" if tenant else line
