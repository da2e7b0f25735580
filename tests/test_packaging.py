"""The package's metadata: which Pythons it installs on, and that the linters aim at the oldest.

torch 2.13 ships wheels for CPython 3.11 to 3.13, so normlab takes any Python from 3.11 on;
ruff and mypy check the code as 3.11 reads it (CI runs on 3.11), so nothing newer slips in.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_python_3_11_and_every_later_version_may_install_it() -> None:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    required = config["project"]["requires-python"]
    assert required == ">=3.11"
    allowed = SpecifierSet(required)
    assert all(v in allowed for v in ("3.11.0", "3.12.0", "3.13.0", "3.14.0"))
    assert "3.10.14" not in allowed
    assert config["tool"]["ruff"]["target-version"] == "py311"  # the oldest version allowed
    assert config["tool"]["mypy"]["python_version"] == "3.11"
