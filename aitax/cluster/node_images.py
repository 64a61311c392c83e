"""The images on a cluster's nodes. There is no registry to pull from, so each node's containerd holds every image
the chart runs, imported from buildah's store (`images.load_into`) or copied from another node's store.

The first node imports each image. When no node runs a container yet (a new cluster), the nodes lacking an image
then take a copy of the first node's image store: a second import of a multi-gigabyte image would cost minutes, and
its unpacked layers the disk again per node. A node already running containers imports each image itself, finding
the layer blobs hard-linked from the first node's store.

A first node that runs nothing and lacks an image starts from the machine's copy of the image store that the last
new cluster's first node held (`images.node_images_home()`, layers hard-linked): a fresh clone's cluster then
imports only the images built since (in CI, those holding the changed code), not every image again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from aitax.cluster import images
from aitax.cluster.node import Node

# A node's image store, under its containerd root: the blobs first (content), the unpacked layers, the metadata.
IMAGE_STORES = ("io.containerd.content.v1.content", "io.containerd.snapshotter.v1.overlayfs",
                "io.containerd.metadata.v1.bolt")


class NodeRuntimes(Protocol):
    """What the image store needs of a cluster: each node's containerd (its `ctr`, a stop and a start), each node's
    folder, and a wait until nodes can take pods again."""

    def ctr(self, node: Node, *args: str, check: bool = True,
            stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess: ...

    def node_home(self, node: Node) -> Path: ...

    def stop_containerd(self, node: Node) -> None: ...

    def start_containerd(self, node: Node) -> None: ...

    def wait_for_nodes(self, nodes: list[Node], what: str) -> None: ...


@dataclass(frozen=True)
class NodeImages:
    runtimes: NodeRuntimes

    def load(self, nodes: list[Node], references: list[str], log: Callable[[str], None] = print) -> None:
        """Each image into every one of `nodes` (the first imports, the rest copy or import; see the module)."""
        first, *others = nodes
        if not self.holds(first, references) and not self.containers(first):
            self._seed_from_machine(first, log)
        self.import_into(first, references, log)
        behind = [node for node in others if not self.holds(node, references)]
        if behind and not any(self.containers(node) for node in (first, *behind)):
            log(f"{', '.join(node.name for node in behind)}: a copy of {first.name}'s images (layers hard-linked)")
            self._clone(first, behind)
            return
        for node in behind:
            self._share_blobs(first, node)
            self.import_into(node, references, log)

    def import_into(self, node: Node, references: list[str], log: Callable[[str], None]) -> None:
        images.load_into(self._ctr_on(node), self.stamps(node), references,
                         log=lambda line: log(f"{node.name}: {line}"))

    def holds(self, node: Node, references: list[str]) -> bool:
        return all(images.is_loaded(self._ctr_on(node), self.stamps(node), r) for r in references)

    def containers(self, node: Node) -> list[str]:
        return self.runtimes.ctr(node, "containers", "ls", "-q").stdout.split()

    def root(self, node: Node) -> Path:
        return self.runtimes.node_home(node) / "containerd" / "root"

    def stamps(self, node: Node) -> Path:
        """What `images.load_into` imported into the node, by image ID."""
        return self.runtimes.node_home(node) / "loaded-images"

    def _ctr_on(self, node: Node) -> Callable[..., subprocess.CompletedProcess]:
        return lambda *args, **kwargs: self.runtimes.ctr(node, *args, **kwargs)

    def _clone(self, source: Node, targets: list[Node]) -> None:
        """With containerd stopped on the source and targets (a database is copied whole only when no one writes
        it), each target's image store becomes a copy of the source's, and so does the machine's copy; containerd
        then starts again and reads it. Kubelet rides out its runtime's restart, as in a containerd upgrade."""
        nodes = [source, *targets]
        for node in nodes:
            self.runtimes.stop_containerd(node)
        try:
            for target in targets:
                copy_image_store(self.root(source), self.stamps(source), self.root(target), self.stamps(target))
            self._keep_for_machine(source)
        finally:
            for node in nodes:
                self.runtimes.start_containerd(node)
        self.runtimes.wait_for_nodes(nodes, "the nodes after their containerd restarted")

    def _seed_from_machine(self, node: Node, log: Callable[[str], None]) -> None:
        """The node's image store replaced by the machine's copy, when there is one from this containerd."""
        kept = images.node_images_home()
        if not (kept / ".complete").exists() or (kept / "containerd-version").read_text() != containerd_version():
            return
        log(f"{node.name}: the machine's image store from {kept} (layers hard-linked)")
        self.runtimes.stop_containerd(node)
        try:
            copy_image_store(kept / "root", kept / "loaded-images", self.root(node), self.stamps(node))
        finally:
            self.runtimes.start_containerd(node)
        self.runtimes.wait_for_nodes([node], f"{node.name} after its containerd restarted")

    def _keep_for_machine(self, node: Node) -> None:
        """The node's image store as the machine's copy (replacing the last), hard-linked; none when the machine's
        cache is on another filesystem (a copy would cost the disk again)."""
        kept = images.node_images_home()
        partial = kept.with_name(kept.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            copy_image_store(self.root(node), self.stamps(node), partial / "root", partial / "loaded-images")
        except subprocess.CalledProcessError:
            shutil.rmtree(partial, ignore_errors=True)
            return
        (partial / "containerd-version").write_text(containerd_version())
        (partial / ".complete").touch()
        shutil.rmtree(kept, ignore_errors=True)
        partial.rename(kept)

    def _share_blobs(self, source: Node, target: Node) -> None:
        def blobs(node: Node) -> Path:
            return self.root(node) / IMAGE_STORES[0] / "blobs" / "sha256"

        blobs(target).mkdir(parents=True, exist_ok=True)
        for blob in blobs(source).iterdir():
            if not (blobs(target) / blob.name).exists():
                os.link(blob, blobs(target) / blob.name)


def copy_image_store(source_root: Path, source_stamps: Path, target_root: Path, target_stamps: Path) -> None:
    """A containerd root's image store and its import stamps: the content blobs (immutable, named by digest) and the
    committed snapshots (the unpacked layers, only ever a container's read-only lower layers) hard-linked, so the
    machine holds them once; the metadata databases copied, as each containerd writes its own. Uploads in progress
    (`ingest`) are not taken."""
    target_root.mkdir(parents=True, exist_ok=True)
    for store in IMAGE_STORES:
        shutil.rmtree(target_root / store, ignore_errors=True)
        subprocess.run(["cp", "-al", str(source_root / store), str(target_root / store)], check=True,
                       capture_output=True)
        for database in (target_root / store).rglob("*.db"):
            database.unlink()  # the hard link: writing through it would write the source's database
            shutil.copy2(source_root / database.relative_to(target_root), database)
    shutil.rmtree(target_root / IMAGE_STORES[0] / "ingest", ignore_errors=True)
    shutil.rmtree(target_stamps, ignore_errors=True)
    shutil.copytree(source_stamps, target_stamps)


def containerd_version() -> str:
    """The machine's containerd: a store it kept is read only by the same version."""
    return subprocess.run([shutil.which("containerd") or "containerd", "--version"], capture_output=True,
                          text=True).stdout.strip()
