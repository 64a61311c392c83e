"""The floor plan holds: import-linter's contracts in pyproject.toml (layers, no circles) over every package."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_import_contracts_are_kept() -> None:
    lint_imports = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    result = subprocess.run([sys.executable, "-c", lint_imports, "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_every_installed_package_is_under_contract() -> None:
    config = _pyproject()
    installed = {pattern.rstrip("*") for pattern in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    contracted = set(config["tool"]["importlinter"]["root_packages"])
    assert installed == contracted
    floors = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]
    layered = {name.strip() for layer in floors for name in layer.split("|")}
    # Every floor is a whole top-level package: none spans two floors, so no import can run back up inside one.
    assert layered == contracted, "a package missing from the floors is free to import anything"
