#!/usr/bin/env bash
# `make test`: installs what it needs and runs every suite, in the order that keeps both cores busy.
# Compiling the Kubernetes tools (about 13 minutes of both cores when cold) and building the images are needed by the
# last two suites alone, so they run in the background at the lowest CPU and I/O priority, on the CPU that the rest
# leaves idle: the downloads of the setup, the local-stack suite (a third of its CPU is idle: its fault and emulation
# tests wait on brokers and clocks) and the unit tests (one process: one core). Then the chart on a real control
# plane (kube-apiserver + kwok), then the real cluster of 3 nodes.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
log=.aitax/logs/test-background.log
setup_lock=.aitax/logs/test-setup.lock
mkdir -p .aitax/logs

# The node's Debian packages (gcc, buildah, mmdebstrap ...) first: the background needs them, and apt runs one at a time.
bash scripts/install-system-packages.sh node || exit
# The images wait for the venv and the Kafka jars: the setup holds this lock until they are in place.
exec 8>"$setup_lock"
flock 8
setsid nice -n 19 ionice -c 3 bash -c 'bash scripts/install-k8s-tools.sh --go --node &&
  exec flock "$1" .venv/bin/aitax images build --no-load' images "$setup_lock" >"$log" 2>&1 8>&- &
background=$!
trap 'kill -- -$background 2>/dev/null' EXIT
make --no-print-directory setup setup-browser setup-schemas setup-camera lint 8>&- || exit
bash scripts/install-k8s-tools.sh --python 8>&- || exit  # the venv, before any test runs from it
exec 8>&-  # the images may build

step() {  # NAME COMMAND...: runs it unless an earlier step failed, and says how long it took
  local name="$1" started=$SECONDS
  shift
  [ "$status" -eq 0 ] || return 0
  "$@" || status=$?
  echo "make test: $name $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $(((SECONDS - started) / 60)) min" \
    "$(((SECONDS - started) % 60)) s"
}

wait_background() {
  wait "$background" && return 0
  echo "make test: compiling the Kubernetes tools or building the images failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  return 1
}

status=0
step "the local-stack suite (tests/integration)" "${PYTEST[@]}" tests/integration
step "the unit tests (tests/unit)" "${PYTEST[@]}" tests/unit
step "the Kubernetes tools and images (background, $log)" wait_background
# The Kafka image's scripts as local processes (marker image_scripts) are left out: the real cluster runs them in pods.
step "the chart on a real control plane (tests/k8s)" "${PYTEST[@]}" -m "not image_scripts" tests/k8s
step "the real cluster of 3 nodes (tests/cluster)" "${PYTEST[@]}" tests/cluster
exit "$status"
