#!/usr/bin/env bash
# On a GPU machine lent to a task (the device tool; docs/accelerators.md), under 5 minutes: checks the cuda runtime
# against the CPU path and writes this product's H200 curves with `aitax calibrate`, from the bundle `make gpu-bundle`
# wrote here (the device has PyTorch but no TensorFlow, weights or package registry). From the device tool:
#   run(command="bash scripts/device-calibrate.sh", carry=[".gpu-bundle"], timeout_s=420)
# The curves, the check and the device's description come back under $OUT.
set -euo pipefail
bundle=${BUNDLE:-.gpu-bundle}
out=${OUT:-/tmp/aitax-device}
mkdir -p "$out"
test -f "$bundle/manifest.json" || { echo "device-calibrate: no $bundle/manifest.json (run make gpu-bundle here first)" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/aitax-site "$bundle"/wheels/*.whl
export PYTHONPATH="$PWD:/tmp/aitax-site" AITAX_HOME=/tmp/aitax-home PYTHONUNBUFFERED=1
aitax() { python3 -m aitax.cli "$@"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; from importlib.metadata import version; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'onnx2torch', version('onnx2torch'))"
} | tee "$out/device.txt"
status=0
aitax gpu-check "$bundle" --out "$out/gpu-check.json" || status=$?
aitax calibrate identify --runtime cuda --conversions "$bundle" --batches 1,2,4,8,16,32,64,128,256 --repeats 20 \
  --threads 2 --name h200-fp32 --out "$out/h200-fp32.yaml"
aitax calibrate detect --runtime cuda --conversions "$bundle" --video "$bundle/clip.mp4" --frames 25 --repeats 8 \
  --name h200-mtcnn --out "$out/h200-mtcnn.yaml"
exit $status
