# Sourced by build.sh and tests/cluster/build_common.sh (bash, set -euo pipefail; `die` defined by
# the caller):
# - require_pin GO_MOD 'MODULE VERSION': dies unless GO_MOD requires MODULE at exactly VERSION (a
#   `require MODULE VERSION` line, or `MODULE VERSION` inside a `require (...)` block; fields
#   compared as strings, so v1.36.3 is not v1.36.30 and `.` matches only itself; a replace or
#   exclude does not count): the cache key must be what the module pins, or the cache would lie;
# - find_go NAME...: sets $go to GO, else `go` on PATH, else /usr/local/go/bin/go; dies naming what
#   it was needed for when there is none;
# - $tmp and $gopid, cleaned on exit: a running `go build` (its process group) is stopped and the
#   temporary build folder removed, also on TERM, INT and HUP.

require_pin() {
  local module=${2% *} version=${2##* }
  [[ -n $module && -n $version && $module != "$version" ]] || die "require_pin: bad pin '$2'"
  awk -v m="$module" -v v="$version" '
    $1 == ")" { block = ""; next }
    $2 == "(" && NF == 2 { block = $1; next }
    block == "require" && $1 == m && $2 == v { found = 1 }
    block == "" && $1 == "require" && $2 == m && $3 == v { found = 1 }
    END { exit !found }
  ' "$1" || die "$1 does not pin $2"
}

go=${GO:-}
find_go() {
  [[ -n $go ]] && return 0
  if command -v go >/dev/null; then
    go=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then
    go=/usr/local/go/bin/go
  else
    die "no go command found (set GO or put go on PATH); needed to build: $*"
  fi
}

tmp=
gopid=
cleanup() {
  if [[ -n $gopid ]]; then kill -TERM -- "-$gopid" 2>/dev/null || true; fi
  if [[ -n $tmp ]]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
