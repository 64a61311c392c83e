"""Container images built here, with no registry: Debian bases from Debian's own packages (mmdebstrap), the
Dockerfiles in containers/ built by buildah against those bases (`--pull=never`), and the results loaded into the
local cluster's containerd.

Caching: buildah's store is machine-wide (`images_home`), like the Kubernetes tools, so a fresh clone (CI) starts
from the bases and layers an earlier clone built instead of 10-15 minutes of cold builds. A base is rebuilt only when
its package list changes (its tag carries BASE_REVISION); buildah's layer cache makes a rebuild with nothing changed a
matter of seconds; superseded layers are pruned when the store outgrows its budget; an image is loaded into containerd
only when its ID differs from the one loaded last (a stamp in the cluster's state folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aitax.common.errors import UserError
from aitax.common.locks import exclusive
from aitax.common.paths import PROJECT_ROOT

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRRORS = (f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
                  f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
                  f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main")
BASE_REVISION = 2  # bump with any change to BASES: the Dockerfiles name bases by this tag
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")


@dataclass(frozen=True)
class BaseImage:
    """A Debian root filesystem as an image. Build bases also trust this machine's extra CAs (PyPI and Maven
    Central may sit behind a TLS-inspecting proxy); runtime bases trust only Debian's."""

    name: str
    packages: tuple[str, ...]
    for_builds: bool = False

    @property
    def reference(self) -> str:
        return f"aitax/{self.name}:{DEBIAN_SUITE}-{BASE_REVISION}"


BASES = (
    BaseImage("debian-python", ("python3", "python3-venv", "ca-certificates", "passwd")),
    BaseImage("debian-python-build", ("python3", "python3-venv", "ca-certificates", "passwd"), for_builds=True),
    BaseImage("debian-java", ("openjdk-17-jre-headless", "ca-certificates", "passwd")),
    BaseImage("debian-java-build", ("openjdk-17-jdk-headless", "maven", "unzip", "ca-certificates", "passwd"),
              for_builds=True),
    BaseImage("debian-prometheus", ("prometheus", "ca-certificates")),
)


@dataclass(frozen=True)
class AppImage:
    """An image from containers/<folder>/Dockerfile; `reference` is what the chart's values name."""

    folder: str
    reference: str

    @property
    def dockerfile(self) -> Path:
        return PROJECT_ROOT / "containers" / self.folder / "Dockerfile"


APP_VERSION = "0.1.0"
IMAGES = (
    AppImage("kafka", f"aitax/kafka:{APP_VERSION}"),
    AppImage("elasticsearch", "aitax/elasticsearch:8.19.21"),
    AppImage("emulator", f"aitax/emulator:{APP_VERSION}"),
    AppImage("pipeline", f"aitax/pipeline:{APP_VERSION}"),
    AppImage("prometheus", "aitax/prometheus:2.42.0"),
)
# Built only when asked for (`aitax images build --gpu`): PyTorch's CUDA build and NVIDIA's libraries, on top of
# the pipeline image.
GPU_IMAGE = AppImage("pipeline-gpu", f"aitax/pipeline-gpu:{APP_VERSION}")
# The pod sandbox image kubelet asks containerd for; its binary is built from Kubernetes' own source.
PAUSE_REFERENCE = "registry.k8s.io/pause:3.10"


@dataclass
class BuildReport:
    reference: str
    seconds: float
    size_bytes: int
    image_id: str


# Each pipeline rebuild after a code change leaves 2-3 GB of superseded layers; past this the store is pruned first.
STORE_BUDGET_GIB = float(os.environ.get("AITAX_IMAGES_BUDGET_GIB", "20"))


def images_home() -> Path:
    """buildah's store: `$AITAX_IMAGES_HOME`, or machine-wide under `${XDG_CACHE_HOME:-~/.cache}/aitax/images`."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("AITAX_IMAGES_HOME") or cache / "aitax" / "images")


def node_images_home() -> Path:
    """The machine's copy of a cluster node's image store (`node_images.NodeImages.load`), beside buildah's."""
    return images_home().with_name("node-images")


def store_bytes() -> int:
    if not images_home().exists():
        return 0
    return int(subprocess.run(["du", "-sb", str(images_home())], capture_output=True, text=True).stdout.split()[0])


def prune() -> None:
    """Drop working containers of interrupted builds and every untagged image (the layer cache included)."""
    buildah("rm", "--all", quiet=True)
    buildah("rmi", "--prune", quiet=True)


def _require(command: str, package: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise UserError(f"`{command}` not found: run `make setup-cluster` (installs the Debian package {package})")
    return path


def _buildah_argv(*args: str) -> list[str]:
    """buildah on aitax's own image store (not the machine's /var/lib/containers)."""
    home = images_home()
    return [_require("buildah", "buildah"), "--root", str(home / "storage"), "--runroot", str(home / "run"),
            "--storage-driver", "overlay", *args]


def _buildah_run(args: tuple[str, ...], capture: bool) -> subprocess.CompletedProcess:
    return subprocess.run(_buildah_argv(*args), capture_output=capture, text=True)


def buildah(*args: str, capture: bool = False, quiet: bool = False) -> str:
    result = _buildah_run(args, capture or quiet)
    if result.returncode != 0:
        detail = (result.stderr or "").strip().splitlines()[-3:] if (capture or quiet) else []
        raise UserError(f"buildah {' '.join(args[:3])} ... failed (exit {result.returncode}) {' | '.join(detail)}")
    return result.stdout if capture else ""


def image_id(reference: str) -> str | None:
    """The image's ID, or None when it is not built (not an error: callers build it)."""
    if not (images_home() / "storage").exists():
        return None
    result = _buildah_run(("inspect", "--type", "image", "--format", "{{.FromImageID}}", reference), True)
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def image_size(reference: str) -> int:
    """Bytes of the image's layers (uncompressed, as stored) from its manifest."""
    manifest = json.loads(buildah("inspect", "--type", "image", "--format", "{{.Manifest}}", reference, capture=True))
    return sum(int(layer["size"]) for layer in manifest.get("layers", []))


def build_base(base: BaseImage, log: Callable[[str], None] = print) -> BuildReport | None:
    """mmdebstrap a minimal Debian with the base's packages and commit it as an image; None when it exists."""
    if image_id(base.reference):
        return None
    mmdebstrap = _require("mmdebstrap", "mmdebstrap")
    started = time.monotonic()
    log(f"building base {base.reference} from Debian {DEBIAN_SUITE} ({', '.join(base.packages)}) ...")
    with tempfile.TemporaryDirectory(prefix="aitax-base-", dir=images_home()) as work:
        rootfs = Path(work) / "rootfs.tar"
        hooks = ["--customize-hook=rm -rf $1/var/cache/apt/archives/*.deb $1/var/lib/apt/lists/*"]
        if base.for_builds:
            # This machine's extra CAs into the PEM bundle and Java's keystore (update-ca-certificates runs the
            # ca-certificates-java hook); pip reads the bundle only when pip.conf says so, as the host's does.
            hooks += [f"--customize-hook=cp -r {HOST_EXTRA_CAS}/. $1/usr/local/share/ca-certificates/",
                      "--customize-hook=chroot $1 update-ca-certificates",
                      "--customize-hook=printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' "
                      "> $1/etc/pip.conf"]
        # Reproducible timestamps; the package versions are whatever the mirror serves (recorded in a label).
        result = subprocess.run(
            [mmdebstrap, "--variant=minbase", f"--include={','.join(base.packages)}", "--mode=root",
             "--aptopt=Acquire::Retries=3", *hooks, DEBIAN_SUITE, str(rootfs), *DEBIAN_MIRRORS],
            capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SOURCE_DATE_EPOCH": "0"})
        if result.returncode != 0:
            raise UserError(f"mmdebstrap for {base.reference} failed: {result.stderr.strip()[-300:]}")
        container = buildah("from", "scratch", capture=True).strip()
        try:
            buildah("add", container, str(rootfs), "/", quiet=True)
            buildah("config", "--env", "LANG=C.UTF-8", "--env", f"PATH={BASE_PATH}",
                    "--label", f"org.opencontainers.image.title=aitax-{base.name}",
                    "--label", f"org.opencontainers.image.base.name=debian:{DEBIAN_SUITE}", container)
            buildah("commit", "--rm", "-q", container, base.reference, quiet=True)
        except BaseException:
            buildah("rm", container, quiet=True)
            raise
    return BuildReport(base.reference, time.monotonic() - started, image_size(base.reference),
                       image_id(base.reference) or "")


def build_pause(pause_binary: Path) -> BuildReport | None:
    if image_id(PAUSE_REFERENCE):
        return None
    started = time.monotonic()
    container = buildah("from", "scratch", capture=True).strip()
    buildah("copy", container, str(pause_binary), "/pause", quiet=True)
    buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
    buildah("commit", "--rm", "-q", container, PAUSE_REFERENCE, quiet=True)
    return BuildReport(PAUSE_REFERENCE, time.monotonic() - started, image_size(PAUSE_REFERENCE),
                       image_id(PAUSE_REFERENCE) or "")


def build_image(image: AppImage) -> BuildReport:
    """buildah bud of the image's Dockerfile from the repository root; its .dockerignore limits the context."""
    started = time.monotonic()
    ignore = image.dockerfile.with_name("Dockerfile.dockerignore")
    buildah("bud", "--pull=never", "--layers", "--isolation=chroot", "--network=host", "-q",
            "--ignorefile", str(ignore), "-f", str(image.dockerfile), "-t", image.reference, str(PROJECT_ROOT),
            quiet=True)
    return BuildReport(image.reference, time.monotonic() - started, image_size(image.reference),
                       image_id(image.reference) or "")


def wanted_images(names: list[str] | None, gpu: bool = False) -> list[AppImage]:
    """The app images named (all but the GPU one by default), with the GPU image last when asked for: it is built
    on the pipeline image."""
    known = [*IMAGES, GPU_IMAGE]
    unknown = set(names or ()) - {i.folder for i in known}
    if unknown:
        raise UserError(f"unknown image(s) {sorted(unknown)}: choose from {[i.folder for i in known]}")
    wanted = [i for i in IMAGES if not names or i.folder in names]
    return [*wanted, GPU_IMAGE] if gpu or GPU_IMAGE.folder in (names or ()) else wanted


def build_all(names: list[str] | None, pause_binary: Path | None, log: Callable[[str], None] = print,
              gpu: bool = False) -> list[BuildReport]:
    """Bases (when missing), the pause image, then the app images named (`wanted_images`)."""
    wanted = wanted_images(names, gpu)
    # One build at a time per store: a second one (`make test`'s cluster tests, while its background build still
    # runs) waits, then finds everything built.
    with exclusive(images_home() / "build.lock", f"another build is using {images_home()}; waiting for it ...", log):
        if store_bytes() > STORE_BUDGET_GIB * 2**30:
            log(f"{images_home()} holds over {STORE_BUDGET_GIB:g} GiB: pruning superseded layers first")
            prune()
        reports = [r for r in (build_base(b, log) for b in BASES) if r]
        if pause_binary is not None:
            reports += [r for r in [build_pause(pause_binary)] if r]
        for image in wanted:
            log(f"building {image.reference} from {image.dockerfile.relative_to(PROJECT_ROOT)} ...")
            reports.append(build_image(image))
            log(f"  {image.reference}: {reports[-1].seconds:.1f} s, {reports[-1].size_bytes / 1e6:.0f} MB")
    return reports


def is_loaded(ctr: Callable[..., subprocess.CompletedProcess], stamps: Path, reference: str) -> bool:
    """Whether the image's current build was imported last time (its stamp) and containerd still has it."""
    stamp = _stamp(stamps, reference)
    current = image_id(reference)
    return current is not None and stamp.exists() and stamp.read_text() == current and \
        bool(ctr("images", "ls", "-q", f"name=={_qualified(reference)}").stdout.strip())


# containerd 1.6 collects garbage while an import runs: a layer it found already unpacked can be collected before the
# next layer is unpacked on it (containerd#3787). Importing again unpacks that layer afresh from the archive.
COLLECTED_PARENT = "does not exist: not found"
IMPORT_ATTEMPTS = 3


def load_into(ctr: Callable[..., subprocess.CompletedProcess], stamps: Path, references: list[str],
              log: Callable[[str], None] = print) -> list[str]:
    """Import each image into containerd's k8s.io namespace unless it is loaded already."""
    stamps.mkdir(parents=True, exist_ok=True)
    loaded = []
    for reference in references:
        if is_loaded(ctr, stamps, reference):
            continue
        current = image_id(reference)
        if current is None:
            raise UserError(f"image {reference} is not built: run `aitax images build`")
        for attempt in range(1, IMPORT_ATTEMPTS + 1):
            failure = _import(ctr, reference)
            if not failure or COLLECTED_PARENT not in failure or attempt == IMPORT_ATTEMPTS:
                break
            log(f"{reference}: containerd collected a layer during the import (containerd#3787): importing again")
        if failure:
            free_gib = shutil.disk_usage(stamps).free / 2**30
            raise UserError(f"loading {reference} into containerd failed ({free_gib:.1f} GiB free at {stamps}): "
                            f"{failure}")
        _stamp(stamps, reference).write_text(current)
        loaded.append(reference)
        log(f"loaded {reference} into the cluster's containerd")
    return loaded


def _import(ctr: Callable[..., subprocess.CompletedProcess], reference: str) -> str:
    """One import, the archive streamed from buildah into containerd (an archive file would hold one more copy of a
    multi-gigabyte image on disk); what went wrong, or nothing."""
    with tempfile.TemporaryFile() as push_errors:
        push = subprocess.Popen(_buildah_argv("push", "-q", reference,
                                              f"docker-archive:/dev/stdout:{_qualified(reference)}"),
                                stdout=subprocess.PIPE, stderr=push_errors)
        try:
            imported = ctr("images", "import", "-", check=False, stdin=push.stdout)
        finally:
            push.stdout.close()
            pushed = push.wait()
        push_errors.seek(0)
        pushing = push_errors.read().decode(errors="replace").strip()
    if pushed == 0 and imported.returncode == 0:
        return ""
    # When the import fails, buildah's error is only the broken pipe it left: containerd's says why.
    detail = imported.stderr.strip() if imported.returncode != 0 else pushing
    return f"buildah push exit {pushed}, ctr import exit {imported.returncode}: {detail[-300:]}"


def _stamp(stamps: Path, reference: str) -> Path:
    return stamps / hashlib.sha256(reference.encode()).hexdigest()[:16]


def _qualified(reference: str) -> str:
    """The name containerd records: Kubernetes normalises `aitax/x:t` to `docker.io/aitax/x:t`."""
    first = reference.split("/", 1)[0]
    return reference if "." in first or ":" in first else f"docker.io/{reference}"
