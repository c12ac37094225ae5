#!/usr/bin/env bash
# Debian packages the tests, demo and benchmark talk to as real peers. Installs what is missing
# when run as root; otherwise says what is missing and leaves the tests to skip.
set -euo pipefail
# Helm is not packaged for Debian: scripts/helm-deps.sh puts the official binary into .tools/bin of
# this checkout (no root needed); the tests look for it there, and so does `command -v` below.
TOOLS="$(cd "$(dirname "$0")/.." && pwd)/.tools/bin"
export PATH="$TOOLS:$PATH"
bash "$(dirname "$0")/helm-deps.sh" "$TOOLS" || echo "system-deps: could not install helm (the chart tests will skip)" >&2
need=()
command -v nginx    >/dev/null 2>&1 || need+=(nginx-light)
command -v haproxy  >/dev/null 2>&1 || need+=(haproxy)
command -v curl     >/dev/null 2>&1 || need+=(curl)
command -v wrk      >/dev/null 2>&1 || need+=(wrk)
command -v openssl  >/dev/null 2>&1 || need+=(openssl)
command -v ip       >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v kubectl  >/dev/null 2>&1 || need+=(kubernetes-client)
# dnsmasq (the binary alone, no system service) is the real DNS server the host-verification
# tests resolve against; without it those tests fail rather than skip.
command -v dnsmasq  >/dev/null 2>&1 || need+=(dnsmasq-base)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)  # promtool: alert rule tests fail without it
# helm: installed above into .tools/bin (not an apt package); listed here so that .ci/run checks it.
command -v helm     >/dev/null 2>&1 || echo "system-deps: helm missing from $TOOLS" >&2
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "system-deps: not root; missing ${need[*]} (tests that need them will skip; the dnsmasq ones fail)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# kubectl is not packaged on every Debian release; its absence only skips the manifest tests.
for pkg in "${need[@]}"; do
    apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null || echo "system-deps: could not install $pkg" >&2
done
