#!/usr/bin/env bash
# Debian packages, by what needs them. Idempotent: installs only what is missing. Versions are pinned to
# Debian 12's; a newer security build is accepted when the pinned one is gone from the mirror.
#   stack (default): a JDK (Kafka, Elasticsearch, and javac for the Elasticsearch plugin), Maven (resolves the
#                    pinned Kafka and Elasticsearch artifacts) and Prometheus.
#   node:            a real Kubernetes node and its images (`aitax cluster`, `aitax images`): containerd, runc, the
#                    CNI plugins, iptables/ipset/conntrack (kube-proxy), mmdebstrap + buildah (images without a
#                    registry), gcc (the pause binary).
#   browser:         Chromium, headless, for the tests that look at the dashboard and the report as a person does.
#   camera:          simulated cameras (`aitax camera serve`): GStreamer's RTSP server, x264 and RTP, driven by
#                    Debian's python3 through PyGObject.
set -euo pipefail

group="${1:-stack}"
declare -A wanted pinned
case "$group" in
  stack)
    wanted=([openjdk-17-jdk-headless]="javac" [maven]="mvn" [prometheus]="prometheus" [util-linux]="unshare")
    pinned=([prometheus]="2.42.0+ds-5+deb12u1")
    ;;
  node)
    # package -> a command (or absolute path) it provides
    wanted=([containerd]="containerd" [runc]="runc" [containernetworking-plugins]="/usr/lib/cni/bridge"
            [iptables]="iptables" [ipset]="ipset" [conntrack]="conntrack" [mmdebstrap]="mmdebstrap"
            [buildah]="buildah" [gcc]="gcc" [libc6-dev]="/usr/lib/x86_64-linux-gnu/libc.a" [openssl]="openssl"
            [iproute2]="tc")  # ip and tc: the nodes' namespaces, links and shaping
    pinned=([containerd]="1.6.20~ds1-1+deb12u3" [runc]="1.1.5+ds1-1+deb12u1"
            [containernetworking-plugins]="1.1.1+ds1-3+b5" [mmdebstrap]="1.3.5-7"
            [buildah]="1.28.2+ds1-3+deb12u1+b3" [iptables]="1.8.9-2")
    ;;
  browser)
    wanted=([chromium]="chromium")
    pinned=([chromium]="156.0.8078.114-1~deb12u1")
    ;;
  camera)
    plugins=/usr/lib/x86_64-linux-gnu/gstreamer-1.0
    wanted=([gir1.2-gst-rtsp-server-1.0]="/usr/lib/x86_64-linux-gnu/girepository-1.0/GstRtspServer-1.0.typelib"
            [gstreamer1.0-plugins-base]="$plugins/libgstapp.so" [gstreamer1.0-plugins-good]="$plugins/libgstrtp.so"
            [gstreamer1.0-plugins-ugly]="$plugins/libgstx264.so"
            [python3-gi]="/usr/lib/python3/dist-packages/gi/__init__.py")
    pinned=([gir1.2-gst-rtsp-server-1.0]="1.22.0-2" [gstreamer1.0-plugins-base]="1.22.0-3+deb12u7"
            [gstreamer1.0-plugins-good]="1.22.0-5+deb12u4" [gstreamer1.0-plugins-ugly]="1.22.0-2+deb12u2"
            [python3-gi]="3.42.2-3+b1")
    ;;
  *) echo "install-system-packages: unknown group '$group' (stack, node, browser or camera)" >&2; exit 2 ;;
esac

missing=()
for package in "${!wanted[@]}"; do
  provided="${wanted[$package]}"
  if [[ "$provided" == /* ]]; then [ -e "$provided" ] || missing+=("$package")
  else command -v "$provided" >/dev/null 2>&1 || missing+=("$package"); fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-packages: missing ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages ($group): ${missing[*]}"
apt-get update -qq
for package in "${missing[@]}"; do
  version="${pinned[$package]:-}"
  if [ -n "$version" ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "$package=$version" >/dev/null; then
    continue
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
done
