"""Running runs: the ``Harness`` (load state, build the stack, loop, save) and the queue
``Worker``."""

from hango.run.decide import Decided
from hango.run.runner import Harness, RunNotResumable
from hango.run.worker import Worker

__all__ = ["Decided", "Harness", "RunNotResumable", "Worker"]
