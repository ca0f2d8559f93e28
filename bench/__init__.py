"""hango benchmarks (run as modules from the repo root, e.g. ``uv run python -m bench.chain``).

Not timed tests: each module prints its own table of ratios measured side by side in one
process. See bench/README.md.
"""
