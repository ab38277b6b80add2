# Sourced by build_helm.sh and build_prometheus.sh: the shared part of the build scripts lives
# beside the control plane's build.sh in lib/testing/ (find_go, and the cleanup of an interrupted
# build; see lib/testing/build_common.sh).
# shellcheck source=../../lib/testing/build_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../lib/testing" && pwd)/build_common.sh"
