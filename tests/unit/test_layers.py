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


def test_the_wheel_installs_one_package_and_every_room_of_it_is_on_a_floor() -> None:
    config = _pyproject()
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["aitax*"]  # one top-level package
    assert config["tool"]["importlinter"]["root_packages"] == ["aitax"]
    floors = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    assert floors["containers"] == ["aitax"]
    layered = {name.strip() for layer in floors["layers"] for name in layer.split("|")}
    rooms = {path.stem for path in (ROOT / "aitax").iterdir()
             if (path / "__init__.py").is_file() or (path.suffix == ".py" and path.stem != "__init__")}
    # Every room is on a floor: one left off would be free to import anything.
    assert layered == rooms
