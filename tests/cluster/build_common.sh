# Sourced by build_helm.sh, build_prometheus.sh and build_otelcol.sh (bash, set -euo pipefail; `die`
# and `say` defined by the caller). Each builds one pinned Go tool into a cache folder keyed by its
# version, and shares with the others:
# - from lib/testing/build_common.sh: require_pin GO_MOD 'MODULE VERSION' (dies unless go.mod
#   requires exactly that version), find_go NAME..., and the cleanup of an interrupted build ($tmp
#   and $gopid);
# - lock_cache BIN SCRIPT: creates BIN and takes its lock (one builder per folder; a second caller
#   waits at most an hour), then removes what an interrupted build left;
# - cached BIN RECIPE EXE...: true when BIN was built with RECIPE and holds every EXE;
# - go_build_into BIN RECIPE LABEL EXES DIR -- GO_BUILD_ARGS...: runs `go build -o $tmp/
#   GO_BUILD_ARGS` in the Go module DIR (nice 19: the build shares the machine with tests; -mod=readonly,
#   GOTOOLCHAIN=local), checks that every EXE (space-separated) came out, moves them into BIN and
#   records RECIPE; an interrupted build never leaves a partial binary in BIN.
# shellcheck source=../../lib/testing/build_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../lib/testing" && pwd)/build_common.sh"

lock_cache() {
  mkdir -p "$1"
  exec 9>"$1/.lock"
  flock -w 3600 9 || die "timed out waiting for another $2 (lock $1/.lock)"
  rm -rf "$1"/.build.*
}

cached() {
  local bin=$1 recipe=$2 exe
  shift 2
  [[ -e $bin/.recipe && $(<"$bin/.recipe") == "$recipe" ]] || return 1
  for exe in "$@"; do [[ -x $bin/$exe && -f $bin/$exe ]] || return 1; done
}

go_build_into() {
  local bin=$1 recipe=$2 label=$3 exes=$4 dir=$5 exe start=$SECONDS
  shift 6 # the five above and `--`
  find_go "$label"
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  rm -f "$bin/.recipe"
  (cd "$dir" &&
    GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly" \
      exec setsid nice -n 19 "$go" build -o "$tmp/" "$@") >&2 &
  gopid=$!
  wait "$gopid" || die "go build failed for $label"
  gopid=
  for exe in $exes; do [[ -x $tmp/$exe ]] || die "go build did not produce $exe"; done
  for exe in $exes; do mv -f "$tmp/$exe" "$bin/$exe"; done
  echo "$recipe" >"$bin/.recipe"
  say "$label: built in $((SECONDS - start))s"
}
