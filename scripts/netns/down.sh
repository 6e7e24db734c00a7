#!/usr/bin/env bash
# Removes the two namespaces of up.sh (and with them the veth pair and tc qdiscs). Processes still
# running inside them are ended first (by PID, from `ip netns pids`). Idempotent.
# Environment: AMP_NETNS_PREFIX (ampnode).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
for i in 1 2; do
  ns=$(ns_name "$i")
  ns_exists "$ns" || continue
  pids=$(ip netns pids "$ns" 2>/dev/null)
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null; sleep 1
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
  fi
  ip netns del "$ns"
done
ip link del "$(ns_if 1)" 2>/dev/null || true   # only if a half-made pair was left in this namespace
echo "netns: down (${AMP_NETNS_PREFIX}1, ${AMP_NETNS_PREFIX}2)"
