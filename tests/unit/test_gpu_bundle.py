"""The GPU bundle and the commands a lent GPU machine runs on it (scripts/device-calibrate.sh), here on the CPU: the
GPU is the one boundary faked (the cuda runtime's torch modules put on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from aitax.common.errors import UserError


@pytest.fixture(scope="module")
def bundle(assets, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from aitax.emulation.device_bundle import write_bundle
    from aitax.pipeline.synth_video import make_video

    folder = tmp_path_factory.mktemp("gpu-bundle")
    video = folder.parent / "bundle-video.mp4"
    make_video(assets.faces_val_dir, video, seconds=4.0, seed=5)
    write_bundle(folder, str(video), frames=4, thumbnails=12, min_face_size=40, wheels=False)
    return folder


@pytest.fixture
def gpu_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from aitax.pipeline.onnx_models import TorchNetwork

    original = TorchNetwork.__init__

    def on_cpu(self, model, device: str = "cuda", threads: int = 1) -> None:
        original(self, model, "cpu", threads)

    monkeypatch.setattr(TorchNetwork, "__init__", on_cpu)


def test_a_bundle_carries_fp16_weights_that_widen_to_within_rounding_of_the_full_network(bundle: Path) -> None:
    from aitax.emulation.device_bundle import read_manifest
    from aitax.pipeline.onnx_models import bundled_conversion

    manifest = read_manifest(bundle)
    assert len(manifest["frames"]) == 4 and sum(len(frame["faces"]) for frame in manifest["frames"]) >= 1
    assert len(list((bundle / "thumbnails").glob("*.png"))) == 12
    carried, widened = (bundle / "facenet.onnx").stat().st_size, len(bundled_conversion(bundle, "facenet"))
    assert carried < 0.55 * widened  # fp16 on the wire, fp32 to run
    assert 0.9999 <= manifest["weights_rounding_min_cosine"] <= 1.0001
    with np.load(bundle / "embeddings.npz") as saved:
        assert saved["cpu"].shape == saved["cpu_rounded_weights"].shape == (12, 128)


def test_the_check_holds_on_the_cpu_and_fails_on_a_tampered_reference(bundle: Path, tmp_path: Path) -> None:
    import shutil

    from aitax.emulation.device_bundle import check_bundle

    result = check_bundle(bundle, device="cpu")
    assert result["holds"], result["conditions"]
    assert [c["holds"] for c in result["conditions"]] == [True] * 6
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle, tampered)
    manifest = json.loads((tampered / "manifest.json").read_text())
    face = next(frame["faces"][0] for frame in manifest["frames"] if frame["faces"])
    face["box"][0] += 3
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    failed = {c["condition"] for c in check_bundle(tampered, device="cpu")["conditions"] if not c["holds"]}
    assert failed == {"mtcnn: frames with the CPU detector's boxes"}


def test_the_device_commands_write_curves_from_the_bundle(bundle: Path, tmp_path: Path, gpu_on_the_cpu) -> None:
    from aitax.cli import main

    identify, detect = tmp_path / "h200-fp32.yaml", tmp_path / "h200-mtcnn.yaml"
    assert main(["calibrate", "identify", "--runtime", "cuda", "--conversions", str(bundle), "--batches", "1,2",
                 "--repeats", "2", "--name", "h200-fp32", "--out", str(identify)]) == 0
    assert main(["calibrate", "detect", "--runtime", "cuda", "--conversions", str(bundle), "--video",
                 str(bundle / "clip.mp4"), "--frames", "2", "--repeats", "1", "--name", "h200-mtcnn",
                 "--out", str(detect)]) == 0
    for path, stage, batches in ((identify, "identify", [1, 2]), (detect, "detect", [1])):
        curve = yaml.safe_load(path.read_text())
        assert (curve["name"], curve["stage"], curve["host_cpu"]) == (path.stem, stage, False)
        assert [batch for batch, _ in curve["per_batch_ms"]] == batches
        assert "GPU bundle written" in curve["provenance"] and "cuda" in curve["provenance"]


def test_bad_bundle_inputs_are_one_line(bundle: Path, tmp_path: Path, capsys) -> None:
    from aitax.cli import main
    from aitax.emulation.device_bundle import write_bundle

    assert main(["calibrate", "identify", "--conversions", str(bundle), "--out", str(tmp_path / "c.yaml")]) == 2
    assert main(["gpu-check", str(tmp_path)]) == 2  # no manifest
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="a folder with other files in it"):
        write_bundle(tmp_path, "unused.mp4", 1, 1, 40, wheels=False)
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "a GPU bundle runs through --runtime cuda, not openvino" in errors[0]
    assert "not a GPU bundle's manifest" in errors[1]
