"""Tests of the web lab (a package, so its module names do not clash with tests/browser)."""
