#!/usr/bin/env bash
# `make test`'s suites, after its setup (the Makefile's prerequisites), each timed.
# - The images build from the start, in the background at the lowest CPU and I/O priority, on the core the unit
#   tests (one process) leave idle.
# - Then the local-stack suite and the real-cluster suite run side by side: each waits on brokers, pods and clocks
#   for about a third of its time, and the other takes those cycles. The cluster suite's output goes to a log, shown
#   when it ends; its fixture waits for the image build (a lock on the image store).
# Compiling the Kubernetes tools in the background too was tried: it made the local-stack suite 6.7 minutes longer
# and one of its camera tests then failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
mkdir -p .aitax/logs
build_log=.aitax/logs/images-build-make.log
cluster_log=.aitax/logs/test-cluster.log
local_log=.aitax/logs/test-integration.log

setsid nice -n 19 ionice -c 3 .venv/bin/aitax images build --no-load >"$build_log" 2>&1 &
build=$!
cluster=""
trap 'kill -- -$build 2>/dev/null; [ -z "$cluster" ] || kill -- -"$cluster" 2>/dev/null' EXIT

took() { echo "$(((SECONDS - $1) / 60)) min $(((SECONDS - $1) % 60)) s"; }
verdict() { [ "$1" -eq 0 ] && echo passed || echo FAILED; }

started=$SECONDS
# The Kafka image's scripts as local processes (marker image_scripts) are left out: the real cluster runs them in pods.
"${PYTEST[@]}" -m "not image_scripts" tests/k8s tests/unit
status=$?
echo "make test: the chart on a real control plane and the unit tests (tests/k8s, tests/unit) $(verdict $status)" \
  "in $(took $started)"
[ "$status" -eq 0 ] || exit "$status"

started=$SECONDS
setsid "${PYTEST[@]}" tests/cluster >"$cluster_log" 2>&1 &
cluster=$!
"${PYTEST[@]}" tests/integration 2>&1 | tee "$local_log"
local_status=${PIPESTATUS[0]}
local_took=$(took $started)
echo "make test: the local-stack suite (tests/integration) $(verdict $local_status) in $local_took"
wait "$cluster"
cluster_status=$?
cluster=""
echo "make test: the real cluster of 3 nodes (tests/cluster, beside the local-stack suite; its log follows):"
cat "$cluster_log"
if ! wait "$build"; then
  echo "make test: building the images failed; the end of $build_log:"
  tail -n 30 "$build_log"
fi
if [ "$local_status" -ne 0 ]; then  # its failures again, after the cluster's log
  sed -n '/short test summary info/,$p' "$local_log"
fi
echo "make test: the local-stack suite (tests/integration) $(verdict $local_status) in $local_took"
echo "make test: the real cluster of 3 nodes (tests/cluster) $(verdict $cluster_status) in $(took $started)"
[ "$local_status" -eq 0 ] && [ "$cluster_status" -eq 0 ]
