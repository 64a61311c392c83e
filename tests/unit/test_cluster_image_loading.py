"""Images into every node of `aitax cluster` (no registry): the first node imports each image; on a new cluster the
others take a copy of its image store (layers hard-linked, databases copied), and a node already running containers
imports each image itself with the layer blobs hard-linked. A new cluster's first node leaves its store to the
machine, and the next clone's new cluster starts from it. containerd is faked at its edge (`ctr`, its start); the
real cluster's fixture loads the real images."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aitax.cluster import images
from aitax.cluster.node import Node
from aitax.cluster.node_images import IMAGE_STORES, NodeImages
from aitax.common.errors import UserError

CONTENT, SNAPSHOTS, METADATA = IMAGE_STORES


@pytest.fixture(autouse=True)
def machine_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The machine-wide caches in this test's folder, and a containerd of a known version."""
    monkeypatch.setenv("AITAX_IMAGES_HOME", str(tmp_path / "machine" / "images"))
    monkeypatch.setattr("aitax.cluster.node_images.containerd_version", lambda: "containerd 1.6.20")
    return images.node_images_home()


class Recording(NodeImages):
    """The images of 3 nodes whose containerd is files on disk: an import writes a blob, an unpacked layer, a stamp
    and a line in each database, as the real one does; containerd's stop, start and the wait for the nodes are
    events."""

    def __init__(self, home: Path, running: set[int] = frozenset(), fail_on: str = "") -> None:
        super().__init__(FakeRuntimes(home))
        object.__setattr__(self, "running", running)
        object.__setattr__(self, "fail_on", fail_on)
        object.__setattr__(self, "node_list", [Node(i) for i in range(3)])

    @property
    def events(self) -> list[tuple]:
        return self.runtimes.events

    def load_images(self, references: list[str], log) -> None:
        self.load(self.node_list, references, log)

    def import_into(self, node: Node, references: list[str], log) -> None:
        for reference in references:
            if (self.stamps(node) / reference).exists():  # imported already, as `images.load_into` skips it
                continue
            self.events.append(("import", node.index, reference))
            if f"{node.index}:{reference}" == self.fail_on:
                raise UserError(f"loading {reference} into containerd failed")
            root = self.root(node)
            for path, text in ((root / CONTENT / "blobs" / "sha256" / f"layer-of-{reference}", reference),
                               (root / SNAPSHOTS / "snapshots" / reference / "fs" / "bin", reference),
                               (self.stamps(node) / reference, "id"),
                               (root / CONTENT / "ingest" / "partial", "half")):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            for database in (root / METADATA / "meta.db", root / SNAPSHOTS / "metadata.db"):
                database.parent.mkdir(parents=True, exist_ok=True)
                database.write_text((database.read_text() if database.exists() else "") + reference)

    def holds(self, node: Node, references: list[str]) -> bool:
        return all((self.stamps(node) / r).exists() for r in references)

    def containers(self, node: Node) -> list[str]:
        return ["a-pod"] if node.index in self.running else []


class FakeRuntimes:
    """The nodes' containerd and kubelets at the image store's edge (`NodeRuntimes`)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.events: list[tuple] = []

    def ctr(self, node: Node, *args: str, check: bool = True, stdin=None) -> subprocess.CompletedProcess:
        raise AssertionError(f"ctr {args} on {node.name}: the recording fakes every use of it")

    def node_home(self, node: Node) -> Path:
        return self.home / "nodes" / node.name

    def stop_containerd(self, node: Node) -> None:
        self.events.append(("stop containerd", node.index, ""))

    def start_containerd(self, node: Node) -> None:
        self.events.append(("start containerd", node.index, ""))

    def wait_for_nodes(self, nodes: list[Node], what: str) -> None:
        self.events.append(("wait until ready", tuple(n.index for n in nodes), ""))


def test_a_new_clusters_nodes_take_a_copy_of_the_first_nodes_images(tmp_path: Path) -> None:
    cluster = Recording(tmp_path)
    cluster.load_images(["kafka", "pipeline"], log=lambda _: None)
    assert [e for e in cluster.events if e[0] == "import"] == [("import", 0, "kafka"), ("import", 0, "pipeline")]
    assert sorted(i for what, i, _ in cluster.events if what == "start containerd") == [0, 1, 2]
    # Kubelets ride out their runtime's restart: nothing goes on until every node can take pods again.
    assert cluster.events[-1] == ("wait until ready", (0, 1, 2), "")
    first = cluster.root(Node(0))
    for follower in (Node(1), Node(2)):
        mine = cluster.root(follower)
        for shared in (CONTENT + "/blobs/sha256/layer-of-pipeline", SNAPSHOTS + "/snapshots/kafka/fs/bin"):
            assert (mine / shared).stat().st_ino == (first / shared).stat().st_ino  # one file on disk
        for database in (METADATA + "/meta.db", SNAPSHOTS + "/metadata.db"):
            assert (mine / database).read_text() == "kafkapipeline"
            assert (mine / database).stat().st_ino != (first / database).stat().st_ino  # each writes its own
        assert not (mine / CONTENT / "ingest").exists()
        assert cluster.holds(follower, ["kafka", "pipeline"])
    # The copy's database is its own: a write to it leaves the first node's as it was.
    (cluster.root(Node(1)) / METADATA / "meta.db").write_text("changed")
    assert (first / METADATA / "meta.db").read_text() == "kafkapipeline"


def test_nodes_that_run_containers_import_each_image_themselves_over_shared_blobs(tmp_path: Path) -> None:
    cluster = Recording(tmp_path, running={1})
    cluster.load_images(["kafka", "pipeline"], log=lambda _: None)
    assert not [e for e in cluster.events if e[0] == "start containerd"]  # no node's containerd was stopped
    assert [(i, r) for what, i, r in cluster.events if what == "import"] == [
        (0, "kafka"), (0, "pipeline"), (1, "kafka"), (1, "pipeline"), (2, "kafka"), (2, "pipeline")]
    blob = Path(CONTENT) / "blobs" / "sha256" / "layer-of-kafka"
    assert (cluster.root(Node(2)) / blob).stat().st_ino == (cluster.root(Node(0)) / blob).stat().st_ino


def test_a_node_that_fails_to_load_fails_the_whole_load(tmp_path: Path) -> None:
    cluster = Recording(tmp_path, running={0}, fail_on="2:kafka")
    with pytest.raises(UserError, match="loading kafka into containerd failed"):
        cluster.load_images(["kafka", "pipeline"], log=lambda _: None)


def test_only_the_nodes_lacking_an_image_are_copied(tmp_path: Path) -> None:
    cluster = Recording(tmp_path)
    cluster.load_images(["kafka"], log=lambda _: None)
    cluster.events.clear()
    cluster.load_images(["kafka"], log=lambda _: None)  # every node holds it: nothing stops
    assert [e for e in cluster.events if e[0] != "import"] == []


def test_a_new_clusters_first_node_leaves_its_store_to_the_machine(tmp_path: Path, machine_cache: Path) -> None:
    cluster = Recording(tmp_path / "checkout")
    cluster.load_images(["kafka", "pipeline"], log=lambda _: None)
    assert machine_cache == tmp_path / "machine" / "node-images"
    layer = Path(SNAPSHOTS) / "snapshots" / "pipeline" / "fs" / "bin"
    assert (machine_cache / "root" / layer).stat().st_ino == (cluster.root(Node(0)) / layer).stat().st_ino
    assert sorted(p.name for p in (machine_cache / "loaded-images").iterdir()) == ["kafka", "pipeline"]
    assert (machine_cache / "containerd-version").read_text() == "containerd 1.6.20"


def test_another_clones_new_cluster_imports_only_what_the_machines_store_lacks(tmp_path: Path) -> None:
    Recording(tmp_path / "first-clone").load_images(["kafka", "pipeline"], log=lambda _: None)
    cluster = Recording(tmp_path / "second-clone")
    cluster.load_images(["kafka", "pipeline", "emulator"], log=lambda _: None)
    assert [(i, r) for what, i, r in cluster.events if what == "import"] == [(0, "emulator")]
    for node in cluster.node_list:
        assert cluster.holds(node, ["kafka", "pipeline", "emulator"])
    # The first clone's cluster is untouched: its node's database is its own.
    first = Recording(tmp_path / "first-clone")
    assert (first.root(Node(0)) / METADATA / "meta.db").read_text() == "kafkapipeline"


def test_a_store_kept_by_another_containerd_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Recording(tmp_path / "first-clone").load_images(["kafka"], log=lambda _: None)
    monkeypatch.setattr("aitax.cluster.node_images.containerd_version", lambda: "containerd 2.1.0")
    cluster = Recording(tmp_path / "second-clone")
    cluster.load_images(["kafka"], log=lambda _: None)
    assert [(i, r) for what, i, r in cluster.events if what == "import"] == [(0, "kafka")]


class FakeCtr:
    """containerd's `ctr` at its edge: each import answers with the next of `answers` (exit code, stderr)."""

    def __init__(self, answers: list[tuple[int, str]]) -> None:
        self.answers = answers
        self.imports = 0

    def __call__(self, *args: str, check: bool = True, stdin=None) -> subprocess.CompletedProcess:
        if args[:2] == ("images", "import"):
            stdin.read()
            code, stderr = self.answers[self.imports]
            self.imports += 1
            return subprocess.CompletedProcess(args, code, "", stderr)
        return subprocess.CompletedProcess(args, 0, "", "")


COLLECTED = ('ctr: failed to prepare extraction snapshot "extract-1 sha256:89eb": parent snapshot sha256:a39b does '
             'not exist: not found')


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image buildah holds, its archive a few bytes."""
    monkeypatch.setattr(images, "image_id", lambda reference: "built-id")
    monkeypatch.setattr(images, "_buildah_argv", lambda *args: ["printf", "archive"])


def test_an_import_whose_parent_layer_containerd_collected_meanwhile_is_made_again(tmp_path: Path, built) -> None:
    ctr = FakeCtr([(1, COLLECTED), (0, "")])
    said: list[str] = []
    assert images.load_into(ctr, tmp_path / "stamps", ["aitax/pipeline:0.1.0"], log=said.append) == \
        ["aitax/pipeline:0.1.0"]
    assert ctr.imports == 2 and "containerd#3787" in said[0]


def test_an_import_that_fails_otherwise_or_keeps_failing_stops_with_containerds_reason(tmp_path: Path, built) -> None:
    ctr = FakeCtr([(1, "ctr: no space left on device")])
    with pytest.raises(UserError, match=r"aitax/kafka:0\.1\.0.*no space left on device"):
        images.load_into(ctr, tmp_path / "stamps", ["aitax/kafka:0.1.0"], log=lambda _: None)
    assert ctr.imports == 1
    ctr = FakeCtr([(1, COLLECTED)] * images.IMPORT_ATTEMPTS)
    with pytest.raises(UserError, match="parent snapshot"):
        images.load_into(ctr, tmp_path / "stamps", ["aitax/kafka:0.1.0"], log=lambda _: None)
    assert ctr.imports == images.IMPORT_ATTEMPTS and not list((tmp_path / "stamps").iterdir())
