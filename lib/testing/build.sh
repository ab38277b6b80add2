#!/usr/bin/env bash
# Makes sure the pinned control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) exist in a cache folder keyed by their versions, building the
# missing ones from the Go modules in lib/testing/build/. Prints one line per binary on stderr
# and the bin folder as the LAST line of stdout, so callers can do `bin=$(lib/testing/build.sh |
# tail -n1)`.
#
# Usage: build.sh [NAME...]   NAME: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#                             kubectl, kwok; default all six. Only the named ones are looked for
#                             and built (a control plane of etcd and kube-apiserver alone needs no
#                             Go when KUBEBUILDER_ASSETS has both).
#
# Environment:
#   APPSERVICE_CACHE_DIR  cache root (default: <repo>/.cache); binaries go to
#                         $APPSERVICE_CACHE_DIR/bin/k8s-<v>_etcd-<v>_kwok-<v>/
#   KUBEBUILDER_ASSETS    an envtest asset folder (etcd, kube-apiserver, kubectl); binaries found
#                         there are symlinked into the cache folder instead of being built (a
#                         binary already built there is kept); without it such links are replaced
#                         by builds
#   GO                    the go command (default: `go` on PATH, else /usr/local/go/bin/go)
#
# An interrupted build never leaves a partial binary: each build goes to a temporary folder next
# to the cache folder and is renamed into place only when complete.
set -euo pipefail

readonly ALL_NAMES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
declare -A wanted=()
if (($# == 0)); then set -- "${ALL_NAMES[@]}"; fi
for name; do
  case " ${ALL_NAMES[*]} " in
    *" $name "*) wanted[$name]=1 ;;
    *) printf 'build.sh: unknown binary %s (one of: %s)\n' "$name" "${ALL_NAMES[*]}" >&2 && exit 2 ;;
  esac
done
want() { [[ -n ${wanted[$1]:-} ]]; }

readonly K8S_VERSION=v1.36.3
readonly ETCD_VERSION=v3.6.16
readonly KWOK_VERSION=v0.8.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${APPSERVICE_CACHE_DIR:-$repo/.cache}
bin=$cache/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}

say() { printf '%s\n' "$*" >&2; }
die() {
  say "build.sh: $*"
  exit 1
}

# require_pin, find_go, and the cleanup of an interrupted build.
# shellcheck source=build_common.sh
source "$here/build_common.sh"

# The cache key must match what the Go modules pin, or the cache would lie.
require_pin "$here/build/kube/go.mod" "k8s.io/kubernetes $K8S_VERSION"
require_pin "$here/build/etcd/go.mod" "go.etcd.io/etcd/server/v3 $ETCD_VERSION"
require_pin "$here/build/kwok/go.mod" "sigs.k8s.io/kwok $KWOK_VERSION"

# pki.ts (beside cluster.ts) makes its certificates with the openssl CLI.
if ! command -v openssl >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    say "openssl: missing, installing with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl >&2; }
  else
    die "the openssl command is needed (apt-get install openssl)"
  fi
fi

mkdir -p "$bin"
# One builder at a time per cache folder; a second caller waits (at most an hour), then finds the
# binaries cached.
exec 9>"$bin/.lock"
flock -w 3600 9 || die "timed out waiting for another build.sh (lock $bin/.lock)"
# Holding the lock, any temporary build folder is a leftover of a killed build.
rm -rf "$bin"/.build.*

# usable NAME: the cached binary exists and runs (a symlink whose target vanished does not count).
usable() { [[ -x $bin/$1 && -f $bin/$1 ]]; }

# Binaries built by an older revision of this script (other flags) are rebuilt: bump RECIPE when
# the way of building changes. Links to KUBEBUILDER_ASSETS are kept.
readonly RECIPE="go build -trimpath, -s -w, Kubernetes version stamped (1)"
if [[ -e $bin/.recipe && $(<"$bin/.recipe") != "$RECIPE" ]] ||
  [[ ! -e $bin/.recipe && -n $(find "$bin" -maxdepth 1 -type f ! -name '.*' -print -quit) ]]; then
  say "binaries in $bin were built differently, rebuilding"
  find "$bin" -maxdepth 1 -type f ! -name '.*' -delete
fi
# Everything built from here on follows RECIPE (written now, so an interrupted build keeps what it
# finished).
echo "$RECIPE" >"$bin/.recipe"

# From KUBEBUILDER_ASSETS (envtest layout), link what it has; remember which ones came from it.
declare -A from_assets=()
if [[ -n ${KUBEBUILDER_ASSETS:-} ]]; then
  for name in etcd kube-apiserver kubectl; do
    src=$KUBEBUILDER_ASSETS/$name
    [[ -x $src && -f $src ]] || continue
    src=$(cd "$(dirname "$src")" && pwd)/$name
    if [[ -L $bin/$name && $(readlink "$bin/$name") == "$src" ]]; then
      from_assets[$name]=$src
      continue
    fi
    if usable "$name" && [[ ! -L $bin/$name ]]; then
      continue # a binary built here wins over envtest's
    fi
    ln -sfn "$src" "$bin/.$name.link" && mv -fT "$bin/.$name.link" "$bin/$name"
    from_assets[$name]=$src
  done
fi
# A link left by an earlier run with KUBEBUILDER_ASSETS set does not count without it: the pinned
# version is built instead.
for name in etcd kube-apiserver kubectl; do
  if [[ -z ${from_assets[$name]:-} && -L $bin/$name ]]; then rm -f "$bin/$name"; fi
done

# build MODULE_DIR LDFLAGS PACKAGE... : builds the given binaries into a temporary folder, then
# moves each into the cache folder (rename on the same file system, so atomic) and reports the time.
build() {
  local mod=$1 ldflags=$2
  shift 2
  local names=() pkg start elapsed
  for pkg in "$@"; do names+=("${pkg##*/}"); done
  find_go "${names[@]}"
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  say "${names[*]}: building from lib/testing/build/$mod ..."
  start=$SECONDS
  # In the background and in a process group of its own, so that a signal to this script is
  # handled at once and cleanup stops go build together with its compilers and linkers.
  (cd "$here/build/$mod" &&
    GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly" \
      exec setsid "$go" build -trimpath -ldflags="$ldflags" -o "$tmp/" "$@") >&2 &
  gopid=$!
  wait "$gopid" || die "go build failed for ${names[*]}"
  gopid=
  elapsed=$((SECONDS - start))
  for name in "${names[@]}"; do
    [[ -x $tmp/$name ]] || die "go build did not produce $name"
    mv -f "$tmp/$name" "$bin/$name"
  done
  say "${names[*]}: built in ${elapsed}s"
  rm -rf "$tmp"
  tmp=
}

report_cached() {
  local name=$1
  if [[ -n ${from_assets[$name]:-} ]]; then
    say "$name: from KUBEBUILDER_ASSETS (${from_assets[$name]})"
  else
    say "$name: cached"
  fi
}

# etcd
if ! want etcd; then
  :
elif usable etcd; then
  report_cached etcd
else
  build etcd "-s -w" appservice-operator/lib/testing/build/etcd
fi

# Kubernetes: one go build for all missing ones, they share most packages.
kube_missing=()
for name in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  want "$name" || continue
  if usable "$name"; then report_cached "$name"; else kube_missing+=("k8s.io/kubernetes/cmd/$name"); fi
done
# What Kubernetes' own build (hack/lib/version.sh) stamps, minus the git commit we do not know;
# without it /version says v0.0.0-master.
kube_ldflags="-s -w"
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
done
((${#kube_missing[@]} == 0)) || build kube "$kube_ldflags" "${kube_missing[@]}"

# kwok
if ! want kwok; then
  :
elif usable kwok; then report_cached kwok; else build kwok "-s -w" sigs.k8s.io/kwok/cmd/kwok; fi

printf '%s\n' "$bin"
