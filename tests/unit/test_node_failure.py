"""A node failure's accounting (aitax.experiment.node_failure), from a phase's RunResult faked at its edge; the
scenario itself runs on the real cluster (tests/cluster)."""

from __future__ import annotations

from types import SimpleNamespace

from aitax.experiment.node_failure import _fault_result


def run(**fields) -> SimpleNamespace:
    base = dict(offered_faces_per_s=20.0, produced_faces=100, identified_faces=100, duplicates=0, notes=[],
                process_failures=[])
    return SimpleNamespace(**{**base, **fields})


def test_pods_that_died_with_the_node_are_noted_and_others_still_fail_the_verdict() -> None:
    restarts = ["pod/load-a: running, restarted 1 times", "pod/load-b: running, restarted 1 times"]
    result = _fault_result(run(process_failures=restarts), {"load-a"}, 2.5, True, 44.0, [])
    assert result.process_failures == ["pod/load-b: running, restarted 1 times"] and not result.verdict.held
    assert "restarted with its node, as expected: pod/load-a: running, restarted 1 times" in result.notes
    held = _fault_result(run(process_failures=restarts[:1]), {"load-a"}, 2.5, True, 44.0, [])
    assert held.verdict.held and held.recovery_s == 44.0 and held.stall_s == 2.5


def test_a_face_the_brokers_hold_but_nobody_identified_is_lost() -> None:
    result = _fault_result(run(identified_faces=97), set(), 1.0, True, 30.0, [])
    assert result.lost == 3 and not result.verdict.held


def test_the_verdict_claims_no_check_of_acknowledged_against_held_where_only_the_brokers_count() -> None:
    result = _fault_result(run(), set(), 1.0, False, None, [])
    assert [c.name for c in result.verdict.conditions] == [
        "no acknowledged face lost", "replicas back in sync", "stage processes ran"]
    assert not result.verdict.held  # replicas never back in sync
    assert any("producers' own counts are not collected" in note for note in result.notes)
