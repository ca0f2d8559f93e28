"""Running runs: the ``Harness`` (load state, build the stack, loop, save), the execution
seam it advances runs through (``hango.run.step``) and the queue ``Worker``."""

from hango.run.decide import Decided
from hango.run.runner import Harness, RunNotResumable
from hango.run.step import StepResult
from hango.run.worker import Worker

__all__ = ["Decided", "Harness", "RunNotResumable", "StepResult", "Worker"]
