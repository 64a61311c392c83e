"""A run's inputs, prepared: a test video composed from labelled faces, and a gallery enrolled and calibrated
(`aitax make-video`, `aitax enroll`, the demo and the benchmarks)."""

from __future__ import annotations

from pathlib import Path

from aitax.common.errors import UserError


def compose_video(faces: Path | None, out: Path, seconds: float, fps: float, seed: int, augment: str = "none",
                  strangers: str | None = None) -> None:
    from tqdm import tqdm

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.synth_video import make_video

    if strangers == "packaged":
        from aitax.pipeline.assets import ensure_strangers

        strangers = ensure_strangers("test")
    with tqdm(total=int(seconds * fps), desc="frames", unit="frame") as bar:
        summary = make_video(faces or ensure_assets().faces_val_dir, out, seconds, fps, seed, progress=bar.update,
                             augment=augment, strangers_dir=Path(strangers) if strangers else None)
    print(f"wrote {out} and its ground truth: {summary['faces_total']} faces "
          f"({summary['stranger_faces_total']} of {summary['strangers']} strangers), "
          f"{summary['faces_per_frame_mean']:.2f} per frame on average (max {summary['faces_per_frame_max']}), "
          f"{summary['sprites']} photos of {len(summary['identities'])} enrolled people, augment {augment}")


def enroll_gallery(images: Path | None, out: Path, impostors: str = "packaged", target_fpir: float = 0.01,
                   views: int = 4) -> None:
    """Enroll, then (unless `impostors` is "none") set the unknown threshold from faces of people not enrolled."""
    import numpy as np

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.detect import FaceDetector
    from aitax.pipeline.facenet import FaceEmbedder
    from aitax.pipeline.gallery import (
        calibrate,
        embed_in_batches,
        enroll,
        enrollment_crops,
        impostor_thumbnails,
        save_gallery,
        stranger_faces,
    )

    if not 0 <= target_fpir < 1:
        raise UserError(f"--target-fpir {target_fpir}: expected a rate in [0, 1)")
    assets = ensure_assets()
    detector = FaceDetector(min_face_size=20)
    embedder = FaceEmbedder(assets.facenet_weights)

    gallery = enroll(images or assets.faces_train_dir, lambda rgb: enrollment_crops(rgb, detector), embedder)
    counts = {identity: len(np.unique(gallery.photos[gallery.labels == identity])) for identity in gallery.identities}
    skipped = sum(gallery.no_face_counts.values())
    print(f"enrolled {sum(counts.values())} faces of {len(counts)} people {counts}, each also covered; "
          f"{skipped} photo(s) without a detectable face skipped")
    if impostors != "none":
        from aitax.pipeline.assets import ensure_strangers

        folder = ensure_strangers("calibration") if impostors == "packaged" else Path(impostors)

        def clear_faces(rgb):
            return [d for d in detector.detect(rgb) if d.confidence >= 0.95]

        crops = impostor_thumbnails(stranger_faces(folder, clear_faces, gallery.identities), detector, views)
        gallery.calibration = calibrate(gallery, embed_in_batches(embedder, crops), target_fpir,
                                        "the packaged calibration strangers" if impostors == "packaged" else impostors)
        gallery.threshold = gallery.calibration.threshold
        print(f"calibrated: {gallery.calibration.describe()}")
    save_gallery(gallery, out)
    print(f"wrote {out}")


def demo_inputs() -> tuple[Path, Path]:
    """The demo's gallery and hard 60 s video under .aitax/demo, made as `aitax demo` makes them when missing
    (the benchmarks that run the demo's load reuse them)."""
    from aitax.common.paths import aitax_home

    folder = aitax_home() / "demo"
    gallery, video = folder / "gallery.npz", folder / "video.mp4"
    if not gallery.is_file():
        enroll_gallery(None, gallery)
    if not video.is_file():
        compose_video(None, video, 60.0, 10.0, 7, augment="hard", strangers="packaged")
    return gallery, video
