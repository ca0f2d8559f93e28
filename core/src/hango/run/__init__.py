"""Running runs: the ``Harness`` (load state, build the stack, loop, save), the execution
seam it advances runs through (``hango.run.step``), the queue ``Worker``, and the ``Engine``
protocol other executors (hango-temporal) implement."""

from hango.run.decide import Decided
from hango.run.engine import Delivered, Engine, EngineError
from hango.run.runner import Harness, RunNotResumable
from hango.run.step import StepResult
from hango.run.worker import Worker

__all__ = [
    "Decided",
    "Delivered",
    "Engine",
    "EngineError",
    "Harness",
    "RunNotResumable",
    "StepResult",
    "Worker",
]
