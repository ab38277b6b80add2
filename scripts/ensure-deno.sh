#!/usr/bin/env bash
# Makes sure the pinned Deno is installed in <repo>/.cache/deno (from the npm registry, package
# deno@DENO_VERSION) and prints the path of the deno binary as the last line of stdout. Quiet
# otherwise, except on failure. Usage: DENO=$(scripts/ensure-deno.sh | tail -n1)
set -euo pipefail

readonly DENO_VERSION=2.9.6

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=$repo/.cache/deno

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x64-glibc ;;
  Linux-aarch64) platform=linux-arm64-glibc ;;
  Darwin-x86_64) platform=darwin-x64 ;;
  Darwin-arm64) platform=darwin-arm64 ;;
  *) echo "ensure-deno.sh: unsupported platform $(uname -s)-$(uname -m)" >&2 && exit 1 ;;
esac
deno=$prefix/node_modules/@deno/$platform/deno

installed_version() { "$deno" --version 2>/dev/null | sed -n 's/^deno \([^ ]*\).*/\1/p'; }

if [[ ! -x $deno || $(installed_version) != "$DENO_VERSION" ]]; then
  command -v npm >/dev/null || { echo "ensure-deno.sh: npm is needed to install Deno" >&2 && exit 1; }
  mkdir -p "$prefix"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "deno@$DENO_VERSION" >"$log" 2>&1; then
    cat "$log" >&2
    echo "ensure-deno.sh: npm install deno@$DENO_VERSION failed" >&2
    exit 1
  fi
  [[ -x $deno ]] || { echo "ensure-deno.sh: $deno missing after npm install" >&2 && exit 1; }
fi

printf '%s\n' "$deno"
