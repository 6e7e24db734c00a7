#!/usr/bin/env bash
# Changes the link rate between the two namespaces: scripts/netns/rate.sh 200mbit | 1gbit | none
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
[[ $# -eq 1 ]] || { echo "usage: $0 RATE|none" >&2; exit 2; }
netns_set_rate "$1"
echo "netns: link rate ${1/none/unlimited}"
