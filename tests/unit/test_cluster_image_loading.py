"""Images into every node of `aitax cluster` (no registry): the first node imports each image, the others follow it
with its layer blobs hard-linked into their stores (containerd faked at its edge; the real cluster's fixture loads
the real images)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cluster.node import Node, RealCluster
from common.errors import UserError


class Recording(RealCluster):
    def __init__(self, home: Path, fail_on: str = "") -> None:
        super().__init__(nodes=3)
        object.__setattr__(self, "_test_home", home)
        object.__setattr__(self, "events", [])
        object.__setattr__(self, "fail_on", fail_on)
        object.__setattr__(self, "guard", threading.Lock())

    @property
    def home(self) -> Path:
        return self._test_home

    def _load_images(self, node: Node, references: list[str], log) -> None:
        with self.guard:
            self.events.append(("load", node.index, references[0]))
        if f"{node.index}:{references[0]}" == self.fail_on:
            raise UserError(f"loading {references[0]} into containerd failed")
        blobs = self._blobs(node)
        blobs.mkdir(parents=True, exist_ok=True)
        (blobs / f"layer-of-{references[0]}").write_text(references[0])

    def _blobs(self, node: Node) -> Path:
        return self.node_home(node) / "containerd" / "root" / "io.containerd.content.v1.content" / "blobs" / "sha256"


def test_the_first_node_loads_each_image_before_the_others_and_they_share_its_layers(tmp_path: Path) -> None:
    cluster = Recording(tmp_path)
    cluster.load_images(["kafka", "pipeline"], log=lambda _: None)
    loads = [event for event in cluster.events if event[0] == "load"]
    assert [(node, image) for _, node, image in loads if node == 0] == [(0, "kafka"), (0, "pipeline")]
    for follower in (1, 2):
        mine = [image for _, node, image in loads if node == follower]
        assert mine == ["kafka", "pipeline"]  # in the first node's order
        assert loads.index(("load", follower, "pipeline")) > loads.index(("load", 0, "pipeline"))
        # Each layer the first node wrote is the same file (one inode) in the follower's store.
        for image in ("kafka", "pipeline"):
            mine_blob = cluster._blobs(Node(follower)) / f"layer-of-{image}"
            assert mine_blob.stat().st_ino == (cluster._blobs(Node(0)) / f"layer-of-{image}").stat().st_ino


def test_a_node_that_fails_to_load_fails_the_whole_load(tmp_path: Path) -> None:
    cluster = Recording(tmp_path, fail_on="2:kafka")
    with pytest.raises(UserError, match="loading kafka into containerd failed"):
        cluster.load_images(["kafka", "pipeline"], log=lambda _: None)
