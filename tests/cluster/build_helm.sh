#!/usr/bin/env bash
# Makes sure the pinned Helm CLI exists in a cache folder keyed by its version, building it from
# the Go module in tests/cluster/build/helm/ when missing (as build.sh builds the control plane).
# Prints progress on stderr and the path of the helm binary as the LAST line of stdout, so callers
# can do `helm=$(tests/cluster/build_helm.sh | tail -n1)`.
#
# Environment:
#   APPSERVICE_CACHE_DIR  cache root (default: <repo>/.cache); the binary goes to
#                         $APPSERVICE_CACHE_DIR/bin/helm-<v>/helm
#   HELM_BIN              an existing helm binary to use instead (printed as is, nothing built)
#   GO                    the go command (default: `go` on PATH, else /usr/local/go/bin/go)
#
# An interrupted build never leaves a partial binary: it goes to a temporary folder next to the
# cache folder and is renamed into place only when complete.
set -euo pipefail

readonly HELM_VERSION=v4.3.2
# Bump when the way of building changes: a binary built with another recipe is rebuilt.
readonly RECIPE="go build -trimpath, -s -w, nice 19, version stamped (1)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${APPSERVICE_CACHE_DIR:-$repo/.cache}
bin=$cache/bin/helm-${HELM_VERSION}

say() { printf '%s\n' "$*" >&2; }
die() {
  say "build_helm.sh: $*"
  exit 1
}

if [[ -n ${HELM_BIN:-} ]]; then
  [[ -x $HELM_BIN && -f $HELM_BIN ]] || die "HELM_BIN=$HELM_BIN is not an executable file"
  say "helm: from HELM_BIN ($HELM_BIN)"
  printf '%s\n' "$HELM_BIN"
  exit 0
fi

# require_pin, lock_cache, cached, go_build_into, and the cleanup of an interrupted build.
# shellcheck source=build_common.sh
source "$here/build_common.sh"
require_pin "$here/build/helm/go.mod" "helm.sh/helm/v4 $HELM_VERSION"
lock_cache "$bin" build_helm.sh
if cached "$bin" "$RECIPE" helm; then
  say "helm: cached"
  printf '%s\n' "$bin/helm"
  exit 0
fi

say "helm: building $HELM_VERSION from tests/cluster/build/helm ..."
# Helm's own Makefile stamps the version into internal/version; without it `helm version` says
# v4.0+unreleased.
go_build_into "$bin" "$RECIPE" helm helm "$here/build/helm" -- -trimpath \
  -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
  helm.sh/helm/v4/cmd/helm
printf '%s\n' "$bin/helm"
