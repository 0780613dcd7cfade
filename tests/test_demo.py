"""`make demo` (scripts/demo.py) on a fresh SQLite database: every example ends where the
README says, the workflow included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_demo_shows_every_example_end_where_it_should(tmp_path):
    env = {**os.environ, "KATHIKON_DB": "sqlite", "KATHIKON_DB_NAME": str(tmp_path / "demo.db")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"always fails\s+dead\s+3/3", out), out
    assert re.search(r"fails twice, then succeeds\s+completed\s+3/5", out), out
    assert "== the batch: completed; children 3 completed, 1 dead" in out
    assert "== the workflow: completed" in out
    assert re.search(r"publish\s+completed\s+\['intro.mp4@1080p', 'intro.mp4@360p', "
                     r"'intro.mp4@720p'\]", out), out
