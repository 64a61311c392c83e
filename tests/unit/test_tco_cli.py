"""`aitax tco` and `aitax plan` through `aitax.cli.main`, with only their module's commands."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import aitax.cli
from tests.unit.results_builders import emulated_run, write_sweep


@pytest.fixture(autouse=True)
def only_tco_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The root command with this module's commands alone (a fresh command table, restored afterwards)."""
    monkeypatch.setattr(aitax.cli, "COMMAND_MODULES", ("aitax.commands.tco",))
    monkeypatch.setattr(aitax.cli.cli, "commands", {})


def run(argv: list[str]) -> int:
    """The commands as `aitax` runs them."""
    return aitax.cli.main(argv)


def test_tco_prints_the_homogeneous_breakdown_and_paper_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco"]) == 0

    out = capsys.readouterr().out
    assert "Mellanox MCP1600 (100 GbE cable)" in out
    assert "$33,577,760" in out
    assert "52 racks x $2,500" in out
    assert "MISMATCH" not in out


def test_tco_design_purpose_built(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco", "--design", "purpose-built"]) == 0

    out = capsys.readouterr().out
    assert "$27,878,431" in out
    assert "Intel Xeon Bronze 3104" in out


def test_compare_prints_saving_checks_and_notes_and_writes_chart_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart, document = tmp_path / "tco.png", tmp_path / "tco.json"

    assert run(["tco", "compare", "--chart", str(chart), "--json", str(document)]) == 0

    out = capsys.readouterr().out
    assert "purpose-built TCO is 16.59% lower" in out
    assert re.search(r"saving\s+16\.59%\s+16\.6%\s+match", out)
    assert "30.9 million" in out and "921 kW" in out
    assert chart.read_bytes().startswith(b"\x89PNG")
    written = json.loads(document.read_text(encoding="utf-8"))
    assert [design["equipment_usd"] for design in written["designs"]] == [33_577_760, 27_878_431]
    assert all(check["matches"] for check in written["paper_checks"])


def test_options_given_before_the_action_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = tmp_path / "before.json"

    assert run(["tco", "--json", str(document), "compare"]) == 0

    assert "saving_percent" in json.loads(document.read_text(encoding="utf-8"))


def test_compare_fails_when_a_catalog_no_longer_matches_the_paper(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = Path(__file__).parents[2] / "aitax" / "tco" / "catalogs" / "paper.yaml"
    changed = tmp_path / "dearer.yaml"
    changed.write_text(source.read_text(encoding="utf-8").replace("price_usd: 17285", "price_usd: 18000"))

    assert run(["tco", "compare", "--catalog", str(changed)]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_capacity_prints_the_fig15_table_and_its_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco", "capacity", "--brokers", "8"]) == 0

    out = capsys.readouterr().out
    assert "10 of 11 rows match; 39 of 40 reported cells match" in out
    assert "drives 3B x 3D: at 24x" in out
    assert "8 brokers x 1 drives per broker, face size 1: stable below 33.6x" in out


def test_plan_prints_both_designs_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = tmp_path / "plan.json"

    assert run(["plan", "--accel", "32", "--streams", "840", "--json", str(document)]) == 0

    out = capsys.readouterr().out
    assert "plan: 32x AI acceleration, 840 streams" in out
    assert "broker nodes" in out and "switches / ports" in out
    written = json.loads(document.read_text(encoding="utf-8"))
    assert written["homogeneous"]["broker_nodes"] >= written["purpose-built"]["broker_nodes"] >= 3


def test_plan_from_emulation_uses_the_measured_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1 face/s per stream, RF 3 over 3 brokers
    results = write_sweep(tmp_path, [emulated_run(1, True, 2 * 6 * 37_300, producers=6)])

    assert run(["plan", "--accel", "8", "--streams", "840", "--from-emulation", str(results)]) == 0

    assert "emulation results.json: 2.00 faces/s per stream at 1x" in capsys.readouterr().out


def test_bad_input_is_a_user_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco", "compare", "--catalog", "nope"]) == 2
    assert re.fullmatch(r"aitax: unknown catalog 'nope'[^\n]*\n", capsys.readouterr().err)
    absent = tmp_path / "absent.json"

    assert run(["plan", "--accel", "8", "--streams", "10", "--from-emulation", str(absent)]) == 2
    assert re.fullmatch(r"aitax: \S*absent.json: cannot read results[^\n]*\n", capsys.readouterr().err)


def test_unknown_design_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco", "--design", "hyperscale"]) == 2

    error = capsys.readouterr().err
    assert error.startswith("aitax tco: ") and "'hyperscale' is not one of" in error
    assert error.count("\n") == 1


def test_bad_face_fraction_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tco", "capacity", "--face-fraction", "-1/4"]) == 2

    assert "'--face-fraction': '-1/4': must be positive" in capsys.readouterr().err


def test_aitax_main_prints_user_errors_on_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert aitax.cli.main(["plan", "--accel", "0", "--streams", "10"]) == 2

    assert capsys.readouterr().err == "aitax: --accel must be at least 1 (native speed), got 0\n"


@pytest.mark.parametrize(
    "argv", [["tco"], ["tco", "compare"], ["tco", "capacity"], ["tco", "schema"], ["plan"]]
)
def test_every_command_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*argv, "--help"]) == 0

    assert len(capsys.readouterr().out.splitlines()) > 5
