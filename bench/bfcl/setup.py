"""Install BFCL into the workspace venv: ``uv run python -m bench.bfcl.setup``.

``bfcl-eval`` pins large ML stacks (torch, vLLM clients, ...) that the multi-turn data and API
implementations never import, so it is installed WITHOUT its dependencies; the only one the
``func_source_code`` modules need is ``mpmath`` (``MathAPI``). Both pins are versions this bench
was verified against. ``uv sync`` removes packages that are not in the lock, so run this again
after a sync (``.ci/run`` does, right after its own).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys

#: The packages and exact versions the bench was verified with.
PINS: dict[str, str] = {"bfcl-eval": "2026.3.23", "mpmath": "1.3.0"}


def missing() -> list[str]:
    """The ``name==version`` pins that are not installed at exactly that version."""
    wrong = []
    for name, version in PINS.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong.append(f"{name}=={version}")
    return wrong


def main() -> int:
    wanted = missing()
    if not wanted:
        print(f"bench.bfcl.setup: {', '.join(f'{n}=={v}' for n, v in PINS.items())} present")
        return 0
    uv = shutil.which("uv")
    if uv is None:
        print("bench.bfcl.setup: uv is not on PATH (install it: python3 -m pip install uv)")
        return 1
    command = [uv, "pip", "install", "--no-deps", "--python", sys.executable, *wanted]
    print("bench.bfcl.setup:", " ".join(command[1:]), flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    raise SystemExit(main())
