"""Kathikon's benchmark suite: ``python -m benchmarks [--quick] [--db …] [--only …]``.

Not shipped with the package and not part of the tests: it measures enqueue,
drain, pickup latency, backlog scaling, worker memory and (``admin_pages``) the
admin pages, and writes ``docs/benchmarks.md``.
"""
