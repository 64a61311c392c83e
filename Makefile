# aitax: the two first commands are `make demo` and `make test`; both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
AITAX := $(BIN)/aitax
STAMP := $(VENV)/.installed
GPU_STAMP := $(VENV)/.installed-gpu
UV_VERSION := 0.13.8
UV := UV_NATIVE_TLS=1 UV_FIND_LINKS="$${PIP_FIND_LINKS:-}" $(BIN)/uv
# Nodes of `make cluster` and `make k8s-demo`: one broker each.
NODES ?= 3

.PHONY: emulate-accel emulate-design fig12 fig15a gpu-bundle setup setup-gpu-runtime setup-k8s setup-cluster setup-browser setup-schemas setup-camera cluster cluster-down images k8s-demo demo test test-k8s test-cluster test-unit test-integration lint up down status clean distclean help

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: $(STAMP)  ## install what the local stack needs: Debian packages, the venv, Kafka and Elasticsearch (cached)
	@bash scripts/install-system-packages.sh
	@$(AITAX) stack install

setup-k8s: setup  ## also the Kubernetes tools the chart tests use (helm, kubeconform, kwok, etcd, kube-*; cached)
	@bash scripts/install-k8s-tools.sh

setup-cluster: setup-k8s  ## also a real node: containerd, runc, CNI, kubelet, kube-proxy, CoreDNS, mmdebstrap, buildah
	@bash scripts/install-k8s-tools.sh --node

# uv installs the venv: the same pinned versions as pip, downloaded in parallel and linked from its machine-wide
# cache (about 25 s from an empty cache here, against 80 s with pip). It reads pip's find-links and the system CAs.
$(STAMP): pyproject.toml Makefile  # the Makefile: it pins uv
	@bash scripts/install-system-packages.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q uv==$(UV_VERSION)
	@$(UV) pip install -q --python $(BIN)/python -e ".[dev]"
	@touch $@

demo: setup  ## the whole pipeline end to end on the local stack: accuracy and latency
	@$(AITAX) stack up
	@$(AITAX) demo

emulate-accel: setup  ## emulated stages, AI acceleration 1x-32x: where latency runs away and what saturated
	@$(AITAX) stack up
	@$(AITAX) emulate --factors 1,2,4,8,16,32 --duration 20 --producers 4 --consumers 8 \
	  --out .aitax/emulation/latest.json --plots .aitax/emulation/plots

# The paper's load scaled with the design: its brokers wrote 10% of 1.1 GB/s at 1x, 2,950 faces/s of 37.3 kB; at
# 1/168, 17.6 faces/s: two emulated streams (20 faces/s). Minute-long points: a drive's page cache holds half a
# minute of writes before the flusher must keep pace with them. 90 s of warm-up with the brokers out of their
# slices, whose JIT compilers run outside them (in a third of a core a JVM compiles for minutes: docs/testbed.md).
DESIGN ?= designs/paper.yaml
emulate-design: setup  ## the sweep on a declared edge data centre scaled onto this machine (DESIGN=designs/paper.yaml; root)
	@$(AITAX) stack up --design $(DESIGN) --no-elasticsearch
	@$(AITAX) emulate --factors 1,2,4,8,16 --warmup 90 --duration 60 --producers 2 --consumers 8 --stop-after 1 \
	  --out .aitax/emulation/design.json --plots .aitax/emulation/design-plots

cluster: setup-cluster  ## a real Kubernetes of NODES (3) nodes here (root): pods are containers; prints the kubeconfig
	@$(AITAX) cluster up --nodes $(NODES)

cluster-down:  ## stop the cluster; removes its pods, nodes, links, mounts and cgroups
	@test -x $(AITAX) && $(AITAX) cluster down || true

images: setup-cluster  ## build the images without a registry (Debian bases, buildah); load them when the cluster runs
	@$(AITAX) images build

k8s-demo: setup-cluster  ## the chart's defaults on the real cluster: faces through real pods, accuracy and latency
	@$(AITAX) cluster demo --nodes $(NODES)

GPU_VIDEO := .aitax/gpu-bundle/video.mp4
gpu-bundle: setup-gpu-runtime  ## what a lent GPU machine needs to check and time the cuda runtime: .gpu-bundle (scripts/device-calibrate.sh)
	@test -f $(GPU_VIDEO) || $(AITAX) make-video --augment hard --strangers packaged --seconds 30 --seed 61 --out $(GPU_VIDEO)
	@$(AITAX) gpu-bundle .gpu-bundle --video $(GPU_VIDEO)

fig12: setup  ## the paper's Fig. 12: Object Detection's detection compute on 1, 2, ... cores, beside the paper's
	@$(AITAX) core-scaling --kinds detect-objects --cores $(shell seq -s, 1 $$(nproc)) --plot .aitax/fig12.png

fig15a: setup-cluster  ## the paper's Fig. 15a on a cluster of 6 nodes: 3 against 5 brokers on shaped links (~60 min)
	@$(BIN)/python benchmarks/fig15a.py

setup-browser: setup  ## also headless Chromium (Debian's) for the dashboard and report tests
	@bash scripts/install-system-packages.sh browser

setup-camera: setup  ## also what simulated cameras need: GStreamer's RTSP server and x264 (Debian's)
	@bash scripts/install-system-packages.sh camera

setup-gpu-runtime: $(GPU_STAMP)  ## also the gpu extra (PyTorch with its CUDA wheels, 2.6 GB; onnx2torch): the cuda runtime's tests run it on the CPU

$(GPU_STAMP): $(STAMP)
	@$(UV) pip install -q --python $(BIN)/python -e ".[dev,gpu]"
	@touch $@

setup-schemas: setup  ## also Grafana's published schemas (npm @grafana/schema, pinned) as JSON Schema (cached)
	@bash scripts/install-dashboard-schemas.sh

test: setup-k8s setup-browser setup-schemas setup-camera setup-gpu-runtime lint  ## every test: real local stack, real kube-apiserver, real cluster of 3 nodes (its node tools: in the background)
	@bash scripts/test.sh

test-k8s: setup-k8s  ## the chart, images and experiment driver on a real local control plane (kube-apiserver + kwok)
	@$(BIN)/python -m pytest -p no:cacheprovider -m k8s tests/k8s tests/unit/test_experiment_spec.py

test-cluster: setup-cluster  ## the chart's defaults on a real cluster of 3 nodes (root; builds and loads the images)
	@$(BIN)/python -m pytest -p no:cacheprovider tests/cluster

test-unit: $(STAMP) setup-schemas setup-gpu-runtime  ## unit tests only (no stack)
	@$(BIN)/python -m pytest -p no:cacheprovider tests/unit

lint: $(STAMP)  ## ruff
	@$(BIN)/ruff check .

up: setup  ## start the local stack (3 brokers, Elasticsearch, Prometheus)
	@$(AITAX) stack up

down:  ## stop the local stack
	@test -x $(AITAX) && $(AITAX) stack down || true

status:  ## the local stack's health
	@$(AITAX) stack status

clean: down  ## stop the stack and delete its data, logs and PID files (keeps downloads)
	@rm -rf .aitax/stack

distclean: clean  ## also delete downloads and the venv
	@rm -rf .aitax $(VENV)
