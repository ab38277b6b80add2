# Sourced by build.sh and build_helm.sh (bash, set -euo pipefail; `die` defined by the caller):
# - find_go NAME...: sets $go to GO, else `go` on PATH, else /usr/local/go/bin/go; dies naming what
#   it was needed for when there is none;
# - $tmp and $gopid, cleaned on exit: a running `go build` (its process group) is stopped and the
#   temporary build folder removed, also on TERM, INT and HUP.

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
