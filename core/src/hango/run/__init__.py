"""Running runs: the ``Harness`` (load state, build the stack, loop, save)."""

from hango.run.runner import Harness, RunNotResumable

__all__ = ["Harness", "RunNotResumable"]
