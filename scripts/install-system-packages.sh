#!/usr/bin/env bash
# Debian packages the local stack needs: a JDK (Kafka, Elasticsearch, and javac for the Elasticsearch
# plugin), Maven (resolves the pinned Kafka and Elasticsearch artifacts) and Prometheus. Idempotent:
# installs only what is missing. Versions are pinned to Debian 12's; a newer security build is accepted.
set -euo pipefail

declare -A wanted=(
  [openjdk-17-jdk-headless]="javac"
  [maven]="mvn"
  [prometheus]="prometheus"
  [util-linux]="unshare"
)
declare -A pinned=(
  [prometheus]="2.42.0+ds-5+deb12u1"
)

missing=()
for package in "${!wanted[@]}"; do
  command -v "${wanted[$package]}" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-packages: missing ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}"
apt-get update -qq
for package in "${missing[@]}"; do
  version="${pinned[$package]:-}"
  if [ -n "$version" ] && apt-get install -y -qq --no-install-recommends "$package=$version" >/dev/null; then
    continue
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
done
