"""``uv run python -m bench.bfcl [--category NAME] [--limit N] [--db URL] [--resume]``.

Exits 0 when every task reached the ground-truth state, 1 otherwise, 2 when BFCL is missing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

import anyio

from bench.bfcl.data import BfclMissing, categories, load_tasks
from bench.bfcl.run import default_db, report, run_tasks
from hango.config import hango_settings
from hango.redact import redact_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bfcl", description=__doc__)
    parser.add_argument("--category", default="multi_turn_base", help="a BFCL v4 multi_turn_*")
    parser.add_argument("--limit", type=int, default=None, help="run the first N tasks only")
    parser.add_argument("--ids", default="", help="comma-separated task ids to run")
    parser.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="kill each task's process once mid-turn, resume it, check nothing ran twice",
    )
    parser.add_argument(
        "--kill",
        default="alternate",
        choices=("alternate", "stream", "batch", "effect"),
        help="resume mode's kill point (effect: after the API call, outside hango's guarantee)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="force hango-summarization's context window to this many tokens",
    )
    args = parser.parse_args(argv)
    try:
        known = categories()
        if args.category not in known:
            parser.error(f"unknown category {args.category!r}; choose from {', '.join(known)}")
        ids = frozenset(i for i in args.ids.split(",") if i) or None
        tasks = load_tasks(args.category, limit=args.limit, ids=ids)
        unknown = sorted((ids or frozenset()) - {t.id for t in tasks})
        if unknown and args.limit is None:
            parser.error(f"no such tasks in {args.category}: {', '.join(unknown)}")
    except BfclMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    version = importlib.metadata.version("bfcl-eval")
    settings = hango_settings()
    if args.resume:
        from bench.bfcl.resume import resume_report, run_resume_tasks

        db = args.db or default_db(args.category, "-resume")
        resumed = anyio.run(run_resume_tasks, tasks, args.category, db, settings, args.kill)
        print(resume_report(resumed, redact_url(db), version))
        return 0 if resumed.passed == resumed.tasks else 1
    db = args.db or default_db(args.category)
    stats = anyio.run(run_tasks, tasks, args.category, db, settings, args.window)
    print(report(stats, redact_url(db), version))
    return 0 if stats.passed == stats.tasks else 1


if __name__ == "__main__":
    raise SystemExit(main())
