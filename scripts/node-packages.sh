#!/usr/bin/env bash
# Installs what a real node (`capstan dev up --real-node`) runs from Debian's packages, if
# missing: containerd, runc, the CNI plugins, iptables, a static busybox (the image Echo's
# Jobs run), and what builds the pause container (gcc, libc6-dev). Needs root and apt-get;
# elsewhere it only says what is missing (the preflight of `--real-node` says it too).
# Also Prometheus and promtool, which tests/cluster/monitoring.rs runs on the chart's alerts.
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables busybox-static iproute2 gcc libc6-dev binutils ca-certificates
  prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "node-packages: missing ${missing[*]}; install them as root: apt-get install ${missing[*]}" >&2
  exit 0
fi
echo "==> installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
