"""Every ```python block of every docs/*.md page runs, and the site builds with --strict.

Each page runs in one fresh module (``docs_<page>``, registered in
``sys.modules`` so Worker classes and ``@task`` functions a page defines are
importable by dotted path), its blocks in order, with Django set up against
the test database. Settings snippets may use ``BASE_DIR`` as in a project's
generated settings.py. On Django 5.2, ``django.tasks`` in a sample is read as the
``django_tasks`` backport. Non-runnable examples use ```sh, ```text or ```ini.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import django
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# A fence may be indented (inside a list item); its body is dedented.
FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
PAGES = sorted(DOCS.glob("*.md"))
OPTIONAL = {"prometheus_client", "opentelemetry"}  # integrations shown in telemetry.md


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, source) of each ```python block."""
    return [(text.count("\n", 0, match.start()) + 2, textwrap.dedent(match.group(2)))
            for match in FENCE.finditer(text)]


def test_block_extraction():
    text = "x\n```python\na = 1\n```\n```sh\nls\n```\n1. item\n\n   ```python\n   b = 2\n   ```\n"
    assert python_blocks(text) == [(3, "a = 1\n"), (11, "b = 2\n")]


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_page_samples_run(page: Path, db: object) -> None:
    text = page.read_text()
    blocks = python_blocks(text)
    if not blocks:
        pytest.skip(f"{page.name} has no python blocks")
    name = "docs_" + page.stem.replace("-", "_")
    module = types.ModuleType(name)
    module.__file__ = str(page)
    module.BASE_DIR = Path("/srv/project")  # type: ignore[attr-defined]
    sys.modules[name] = module
    saved = {signal: list(signal.receivers) for signal in _signals()}
    try:
        for line, source in blocks:
            if django.VERSION < (6, 0):
                if importlib.util.find_spec("django_tasks") is None and "django.tasks" in source:
                    pytest.skip("needs django.tasks or the django-tasks backport")
                source = source.replace("django.tasks", "django_tasks")
            code = compile("\n" * (line - 1) + source, str(page), "exec")
            try:
                exec(code, module.__dict__)
            except ModuleNotFoundError as exc:
                if exc.name and exc.name.split(".")[0] in OPTIONAL:
                    pytest.skip(f"{page.name} needs {exc.name} (pip install 'kathikon[test]')")
                raise AssertionError(f"{page.name}, block at line {line} failed: {exc}") from exc
            except Exception as exc:
                raise AssertionError(f"{page.name}, block at line {line} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
    finally:
        from kathikon import telemetry

        telemetry.detach_default_logger()
        for signal, receivers in saved.items():  # receivers a page connected stay on the page
            signal.receivers[:] = receivers
            signal.sender_receivers_cache.clear()
        sys.modules.pop(name, None)
        from kathikon import jobspec

        for path in [path for path in jobspec._worker_cache if path.startswith(name + ".")]:
            del jobspec._worker_cache[path]


def _signals() -> list[Any]:
    from kathikon import compat, signals

    found = list(signals.ALL_SIGNALS.values())
    if compat.AVAILABLE:
        found += [compat.task_enqueued, compat.task_started, compat.task_finished]
    return found


def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install 'kathikon[docs]')")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",  # --quiet would hide warnings
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    html = "".join(path.read_text(errors="replace") for path in (tmp_path / "site").rglob("*.html"))
    assert "fonts.googleapis.com" not in html, "the site must not load remote assets"
