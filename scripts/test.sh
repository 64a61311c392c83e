#!/usr/bin/env bash
# `make test`'s suites, after its setup (the Makefile's prerequisites), each timed. What only the real-cluster suite
# needs is made in the background, at the lowest CPU and I/O priority, on the core the unit tests (one process) leave
# idle: the node's tools (kubelet, kube-proxy, CoreDNS, kube-router: about 5.5 minutes of Go on a new machine), then
# the images. The cluster suite waits for them. Two other overlaps were tried and dropped: compiling all the Kubernetes
# tools (13 minutes, the control plane's too) beside the local-stack suite made it 6.7 minutes longer (no time saved
# in all) and failed a camera test, when every detector still started TensorFlow; the local-stack and cluster suites
# side by side kept both cores busy (idle 0-8%), ran 37 of the local suite's 77 tests in 29 minutes (all 77 take 27
# alone) and failed a camera test and two cluster tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
log=.aitax/logs/node-tools-and-images-make.log
mkdir -p .aitax/logs

setsid nice -n 19 ionice -c 3 \
  bash -c 'bash scripts/install-k8s-tools.sh --node && exec .venv/bin/aitax images build --no-load' >"$log" 2>&1 &
build=$!
trap 'kill -- -$build 2>/dev/null' EXIT

step() {  # NAME COMMAND...: runs it unless an earlier step failed, and says how long it took
  local name="$1" started=$SECONDS
  shift
  [ "$status" -eq 0 ] || return 0
  "$@" || status=$?
  echo "make test: $name $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $(((SECONDS - started) / 60)) min" \
    "$(((SECONDS - started) % 60)) s"
}

wait_build() {
  wait "$build" && return 0
  echo "make test: installing the node's tools or building the images failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  return 1
}

status=0
# The Kafka image's scripts as local processes (marker image_scripts) are left out: the real cluster runs them in pods.
step "the chart on a real control plane and the unit tests (tests/k8s, tests/unit)" \
  "${PYTEST[@]}" -m "not image_scripts" tests/k8s tests/unit
step "the local-stack suite (tests/integration)" "${PYTEST[@]}" tests/integration
step "the node's tools and the images (made in the background, $log)" wait_build
step "the real cluster of 3 nodes (tests/cluster)" "${PYTEST[@]}" tests/cluster
exit "$status"
