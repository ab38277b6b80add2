#!/usr/bin/env bash
# Makes sure the pinned Prometheus server and promtool exist in a cache folder keyed by their
# version, building both from the Go module in tests/cluster/build/prometheus/ when missing (as
# build_helm.sh builds Helm). Prints progress on stderr and, as the LAST line of stdout, the path
# of a folder holding the executables `prometheus` and `promtool` (the layout of Prometheus's
# release archives), so callers can do
#   dir=$(tests/cluster/build_prometheus.sh | tail -n1); "$dir/promtool" check rules rules.yaml
#
# Environment:
#   APPSERVICE_CACHE_DIR  cache root (default: <repo>/.cache); the binaries go to
#                         $APPSERVICE_CACHE_DIR/bin/prometheus-<v>/{prometheus,promtool}
#   PROMETHEUS_DIR        an existing folder with `prometheus` and `promtool` to use instead (e.g.
#                         an unpacked release archive; printed as is, nothing built)
#   GO                    the go command (default: `go` on PATH, else /usr/local/go/bin/go)
#
# The build: both commands in one `go build` (the packages they share are compiled once), with
# -trimpath, -s -w, the version stamped into github.com/prometheus/common/version (what
# `prometheus --version` prints), and the tag remove_all_sd (Prometheus's own build tag: the
# cloud service discoveries are left out; static, file and HTTP discovery stay, and the tests
# use static targets). The web UI's assets are not built in (no tag builtinassets): the HTTP API
# works, the UI pages do not.
#
# An interrupted build never leaves a partial binary: it goes to a temporary folder next to the
# cache folder and is renamed into place only when complete.
set -euo pipefail

# The Go module version of Prometheus 3.16.0 (Prometheus 3.x is published as v0.3xx.y).
readonly PROMETHEUS_VERSION=v0.316.0
readonly PROMETHEUS_RELEASE=3.16.0
# Bump when the way of building changes: a binary built with another recipe is rebuilt.
readonly RECIPE="go build -trimpath, -s -w, nice 19, remove_all_sd, version stamped (1)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${APPSERVICE_CACHE_DIR:-$repo/.cache}
bin=$cache/bin/prometheus-${PROMETHEUS_VERSION}

say() { printf '%s\n' "$*" >&2; }
die() {
  say "build_prometheus.sh: $*"
  exit 1
}

if [[ -n ${PROMETHEUS_DIR:-} ]]; then
  for b in prometheus promtool; do
    [[ -x $PROMETHEUS_DIR/$b && -f $PROMETHEUS_DIR/$b ]] ||
      die "PROMETHEUS_DIR=$PROMETHEUS_DIR has no executable $b"
  done
  say "prometheus, promtool: from PROMETHEUS_DIR ($PROMETHEUS_DIR)"
  printf '%s\n' "$PROMETHEUS_DIR"
  exit 0
fi

# require_pin, lock_cache, cached, go_build_into, and the cleanup of an interrupted build.
# shellcheck source=build_common.sh
source "$here/build_common.sh"
require_pin "$here/build/prometheus/go.mod" "github.com/prometheus/prometheus $PROMETHEUS_VERSION"
lock_cache "$bin" build_prometheus.sh
if cached "$bin" "$RECIPE" prometheus promtool; then
  say "prometheus, promtool: cached"
  printf '%s\n' "$bin"
  exit 0
fi

say "prometheus, promtool: building $PROMETHEUS_VERSION ($PROMETHEUS_RELEASE) from tests/cluster/build/prometheus ..."
# Prometheus's release builds (promu) stamp these; without them `prometheus --version` prints
# nothing useful. No build date: the same sources give the same binaries.
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$PROMETHEUS_RELEASE -X $v.Revision=$PROMETHEUS_VERSION"
ldflags+=" -X $v.Branch=HEAD -X $v.BuildUser=appservice-operator/build_prometheus.sh"
go_build_into "$bin" "$RECIPE" "prometheus, promtool" "prometheus promtool" \
  "$here/build/prometheus" -- -trimpath -tags remove_all_sd -ldflags="$ldflags" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
printf '%s\n' "$bin"
