"""What the kubernetes backend checks against the release before anything changes (the API server faked at its
edge; the whole path on a real API server: tests/k8s)."""

from __future__ import annotations

import pytest

from aitax.common.errors import UserError
from aitax.experiment.kubernetes_api import Scaled
from aitax.experiment.kubernetes_backend import KubernetesBackend
from aitax.experiment.spec import parse_spec


def test_a_closed_loop_on_a_three_stage_release_is_refused_before_anything_changes() -> None:
    spec = parse_spec({"name": "closed", "mode": "emulated", "phases": [
        {"name": "p", "duration": 30, "in_flight": 2, "replicas": {"emulate-producers": 1, "emulate-consumers": 2}}]},
        source="closed.yaml")

    class ThreeStages:
        """A release whose emulated producers publish frames (stages: 3); nothing here can change it."""

        def check_reachable(self) -> str:
            return "v1.36"

        def find_workload(self, release: str, stage: str) -> Scaled:
            args = ("emulate-producers", "--stages", "3") if stage == "emulate-producers" else (stage,)
            return Scaled(stage=stage, kind="Deployment", name=f"{release}-{stage}", container=stage,
                          original_replicas=1, args=args)

    with pytest.raises(UserError, match=r"closed.yaml: phases\[0\].in_flight: a closed loop runs two stages, but "
                                        r"release aitax runs three"):
        KubernetesBackend(spec, ThreeStages()).prepare()  # type: ignore[arg-type]
