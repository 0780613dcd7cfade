"""The benchmark suite still runs: its smallest piece (enqueue + bulk, tiny N) on this database.

Not a performance test: nothing here looks at the figures beyond "a rate came back".
"""

from __future__ import annotations

import pytest

from tests.bench_runs import bench_vendor, run_bench


@pytest.mark.slow
def test_benchmark_enqueue_phases_run(tmp_path):
    result = run_bench(tmp_path, bench_vendor(), "smoke", "--only", "enqueue,bulk",
                       "--size", "single=50", "--size", "bulk=200", timeout=60)
    assert result["phases"]["enqueue"]["n"] == 50
    assert result["phases"]["enqueue"]["rate"] > 0
    assert result["phases"]["bulk"]["rate"] > 0
