"""A dynamic volume provisioner for the cluster on this machine: a PVC of the `aitax-local` StorageClass gets a
folder under the cluster's state (mode 0777: pods run as any non-root user) as a `local` PersistentVolume pinned
to the node the scheduler chose for its first pod (the class binds on first consumer), as a node's own disk is; a
released volume's folder and PV are deleted. It polls every 2 s (a handful of claims).

Run by `aitax cluster up` as a host process: python -m aitax.cluster.provisioner --kubeconfig K --volumes DIR
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

PROVISIONER = "aitax.local/host-path"
POLL_S = 2.0


SELECTED_NODE = "volume.kubernetes.io/selected-node"


def reconcile(core, volumes: Path, storage_class: str) -> None:
    from kubernetes import client

    for claim in core.list_persistent_volume_claim_for_all_namespaces().items:
        annotations = claim.metadata.annotations or {}
        if (claim.status.phase != "Pending" or claim.spec.volume_name
                or annotations.get("volume.kubernetes.io/storage-provisioner") != PROVISIONER
                or claim.spec.storage_class_name != storage_class or not annotations.get(SELECTED_NODE)):
            continue
        name = f"pvc-{claim.metadata.uid}"
        folder = volumes / f"{claim.metadata.namespace}-{claim.metadata.name}-{claim.metadata.uid[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)
        volume = client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name, annotations={"pv.kubernetes.io/provisioned-by": PROVISIONER}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": claim.spec.resources.requests["storage"]},
                access_modes=claim.spec.access_modes, persistent_volume_reclaim_policy="Delete",
                storage_class_name=storage_class, volume_mode=claim.spec.volume_mode or "Filesystem",
                claim_ref=client.V1ObjectReference(namespace=claim.metadata.namespace, name=claim.metadata.name,
                                                   uid=claim.metadata.uid),
                local=client.V1LocalVolumeSource(path=str(folder)),
                node_affinity=client.V1VolumeNodeAffinity(required=client.V1NodeSelector(node_selector_terms=[
                    client.V1NodeSelectorTerm(match_expressions=[client.V1NodeSelectorRequirement(
                        key="kubernetes.io/hostname", operator="In", values=[annotations[SELECTED_NODE]])])]))))
        try:
            core.create_persistent_volume(volume)
            print(f"provisioned {name} at {folder} for {claim.metadata.namespace}/{claim.metadata.name}", flush=True)
        except client.ApiException as error:
            if error.status != 409:  # 409: created on an earlier pass
                raise
    for volume in core.list_persistent_volume().items:
        annotations = volume.metadata.annotations or {}
        if annotations.get("pv.kubernetes.io/provisioned-by") != PROVISIONER or volume.status.phase != "Released":
            continue
        if volume.spec.persistent_volume_reclaim_policy != "Delete":
            continue
        folder = Path(volume.spec.local.path)
        if folder.parent == volumes:  # never outside this provisioner's folder
            shutil.rmtree(folder, ignore_errors=True)
        core.delete_persistent_volume(volume.metadata.name)
        print(f"deleted {volume.metadata.name} and {folder}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aitax.cluster.provisioner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--volumes", type=Path, required=True, help="folder holding every volume's folder")
    parser.add_argument("--storage-class", default="aitax-local")
    parser.add_argument("--marker", default="", help="ignored: identifies this process to `aitax cluster down`")
    args = parser.parse_args(argv)
    from kubernetes import client, config

    config.load_kube_config(args.kubeconfig)
    core = client.CoreV1Api()
    args.volumes.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            reconcile(core, args.volumes.resolve(), args.storage_class)
        except Exception as error:  # the API server restarting: try again on the next pass
            print(f"provisioner: {type(error).__name__}: {str(error)[:200]}", flush=True)
        time.sleep(POLL_S)


if __name__ == "__main__":
    raise SystemExit(main())
