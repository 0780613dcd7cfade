"""kathikon.apps: the enqueue path loads with the app, and ``import kathikon`` stays light.

Both read one fresh interpreter's modules: this test process imported everything long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
import kathikon
before = sorted(m for m in sys.modules if m.startswith("kathikon."))
import django
django.setup()
after = sorted(m for m in sys.modules if m.startswith("kathikon."))
print(json.dumps({"before": before, "after": after}))
"""


@pytest.fixture(scope="module")
def modules() -> dict[str, list[str]]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_setup_loads_the_insert_path_so_the_first_enqueue_does_not(modules):
    after = modules["after"]
    for module in ("kathikon.api", "kathikon.jobspec", "kathikon.storage.inserts",
                   "kathikon.storage.prepared"):
        assert module in after


def test_import_kathikon_alone_touches_neither_models_nor_storage(modules):
    before = modules["before"]
    assert "kathikon.models" not in before
    assert not [m for m in before if m.startswith("kathikon.storage")]
