"""pytest plugin for users' test suites: fixtures around ``kathikon.testing``.

Loaded automatically (entry point ``pytest11``) when Kathikon is installed.
"""
