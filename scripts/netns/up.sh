#!/usr/bin/env bash
# Two "nodes" on this machine: network namespaces ${AMP_NETNS_PREFIX}1 and 2 joined by a veth
# pair (addresses ${AMP_NETNS_SUBNET}.1 and .2 in a private /24), loopback up, and optionally a
# `tc tbf` rate limit on both ends. Needs root (CAP_NET_ADMIN). Idempotent: when the namespaces
# exist, only the rate is (re)applied.
#
#   scripts/netns/up.sh [RATE]        # RATE: e.g. 1gbit, 200mbit; none or empty: unlimited
#   scripts/netns/run.sh ...          # mpirun across the two nodes
#   scripts/netns/down.sh
#
# Environment: AMP_NETNS_PREFIX (ampnode), AMP_NETNS_SUBNET (10.213.7), AMP_NETNS_RATE (the
# default of RATE). See common.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
rate=${1:-$AMP_NETNS_RATE}
[[ $(id -u) -eq 0 ]] || { echo "netns/up.sh: needs root" >&2; exit 1; }
((${#AMP_NETNS_PREFIX} <= 12)) || { echo "netns/up.sh: AMP_NETNS_PREFIX longer than 12 characters" >&2; exit 2; }

n1=$(ns_name 1); n2=$(ns_name 2); v1=$(ns_if 1); v2=$(ns_if 2)
if ! ns_exists "$n1" || ! ns_exists "$n2"; then
  cleanup() { ip netns del "$n1" 2>/dev/null || true; ip netns del "$n2" 2>/dev/null || true; ip link del "$v1" 2>/dev/null || true; }
  trap 'cleanup' ERR
  ip netns add "$n1"
  ip netns add "$n2"
  ip link add "$v1" type veth peer name "$v2"
  ip link set "$v1" netns "$n1"
  ip link set "$v2" netns "$n2"
  ip -n "$n1" addr add "$(ns_addr 1)/24" dev "$v1"
  ip -n "$n2" addr add "$(ns_addr 2)/24" dev "$v2"
  for i in 1 2; do
    ip -n "$(ns_name $i)" link set lo up
    ip -n "$(ns_name $i)" link set "$(ns_if $i)" up
  done
  trap - ERR
fi
netns_set_rate "$rate"
for i in 1 2; do   # both ends up and carrying (LOWER_UP once the peer is up)
  ip -n "$(ns_name $i)" link show "$(ns_if $i)" | grep -q LOWER_UP ||
    { echo "netns/up.sh: $(ns_if $i) in $(ns_name $i) is not up" >&2; exit 1; }
done
[[ "$rate" == none ]] && rate=""
echo "netns: $n1 ($(ns_addr 1)) <-> $n2 ($(ns_addr 2)), link ${rate:-unlimited}"
