#!/usr/bin/env bash
# Makes sure the pinned OpenTelemetry Collector of the traces end-to-end test exists in a cache
# folder keyed by its release, building it from the Go module in tests/cluster/build/otelcol/ when
# missing (as build_prometheus.sh builds Prometheus). The distribution has the OTLP receiver, the
# batch processor and the contrib file exporter, nothing else (build/otelcol/main.go). Prints
# progress on stderr and, as the LAST line of stdout, the path of the executable, so callers can do
#   otelcol=$(tests/cluster/build_otelcol.sh | tail -n1); "$otelcol" --config=file:config.yaml
#
# Environment:
#   APPSERVICE_CACHE_DIR  cache root (default: <repo>/.cache); the binary goes to
#                         $APPSERVICE_CACHE_DIR/bin/otelcol-<release>/otelcol
#   OTELCOL_BIN           an existing collector executable with the otlp receiver and the file
#                         exporter to use instead (printed as is, nothing built)
#   GO                    the go command (default: `go` on PATH, else /usr/local/go/bin/go)
#
# Every collector module is at one release: core v0.161.0 (its stable modules v1.67.0) and
# contrib v0.161.0. An interrupted build never leaves a partial binary: it goes to a temporary
# folder next to the cache folder and is renamed into place only when complete.
set -euo pipefail

readonly OTELCOL_RELEASE=v0.161.0
# Bump when the way of building changes: a binary built with another recipe is rebuilt.
readonly RECIPE="go build -trimpath, -s -w, nice 19, version stamped (1)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${APPSERVICE_CACHE_DIR:-$repo/.cache}
bin=$cache/bin/otelcol-${OTELCOL_RELEASE}

say() { printf '%s\n' "$*" >&2; }
die() {
  say "build_otelcol.sh: $*"
  exit 1
}

if [[ -n ${OTELCOL_BIN:-} ]]; then
  [[ -x $OTELCOL_BIN && -f $OTELCOL_BIN ]] || die "OTELCOL_BIN=$OTELCOL_BIN is not an executable file"
  say "otelcol: from OTELCOL_BIN ($OTELCOL_BIN)"
  printf '%s\n' "$OTELCOL_BIN"
  exit 0
fi

# require_pin, lock_cache, cached, go_build_into, and the cleanup of an interrupted build.
# shellcheck source=build_common.sh
source "$here/build_common.sh"
require_pin "$here/build/otelcol/go.mod" "go.opentelemetry.io/collector/otelcol $OTELCOL_RELEASE"
lock_cache "$bin" build_otelcol.sh
if cached "$bin" "$RECIPE" otelcol; then
  say "otelcol: cached"
  printf '%s\n' "$bin/otelcol"
  exit 0
fi

say "otelcol: building $OTELCOL_RELEASE from tests/cluster/build/otelcol ..."
go_build_into "$bin" "$RECIPE" otelcol otelcol "$here/build/otelcol" -- \
  -trimpath -ldflags="-s -w -X main.version=${OTELCOL_RELEASE#v}" .
printf '%s\n' "$bin/otelcol"
