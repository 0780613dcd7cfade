"""The whole-process fixtures of tests/runtime serve the metrics tests too."""

from tests.runtime.conftest import worker_processes  # noqa: F401
