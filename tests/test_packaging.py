"""What ``pip install .`` installs: every package of the source tree (a folder with an
``__init__.py`` under seqlower/ or passes/) is listed in pyproject.toml, so a module
added in a new folder cannot be missing from a non-editable install while the editable
one the suite runs on finds it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_of_the_tree_is_installed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    where = {name: ROOT / path for name, path in config.get("package-dir", {}).items()}
    found = set()
    for init in (ROOT / "seqlower").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(ROOT).parts))
    for init in (ROOT / "passes").rglob("__init__.py"):
        found.add(".".join(("seqlower", "passes", *init.parent.relative_to(ROOT / "passes").parts)))
    assert found == listed, (sorted(found - listed), sorted(listed - found))
    assert where.get("seqlower.passes") == ROOT / "passes"
