# shellcheck shell=bash disable=SC2034
# Shared settings of scripts/netns/*.sh (sourced). Every value can be set in the environment.
#   AMP_NETNS_PREFIX  namespace name prefix: the "nodes" are ${PREFIX}1 and ${PREFIX}2, which are
#                     also their hostnames inside (default ampnode; at most 12 characters)
#   AMP_NETNS_SUBNET  first three octets of the private /24 (default 10.213.7): node i has .i
#   AMP_NETNS_RATE    link rate for `tc qdisc ... tbf` on both ends of the veth pair, e.g. 1gbit,
#                     200mbit; empty or "none": unlimited (default)
AMP_NETNS_PREFIX=${AMP_NETNS_PREFIX:-ampnode}
AMP_NETNS_SUBNET=${AMP_NETNS_SUBNET:-10.213.7}
AMP_NETNS_RATE=${AMP_NETNS_RATE:-}
export AMP_NETNS_PREFIX AMP_NETNS_SUBNET AMP_NETNS_RATE
netns_cidr="${AMP_NETNS_SUBNET}.0/24"
netns_nodes=2
ns_name() { echo "${AMP_NETNS_PREFIX}$1"; }     # ns_name 1 -> ampnode1
ns_if() { echo "${AMP_NETNS_PREFIX}v$1"; }       # the veth end inside node i
ns_addr() { echo "${AMP_NETNS_SUBNET}.$1"; }
ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$1"; }

# tc tbf on both ends: rate R, a burst of ~2 ms at R (at least 64 KiB: veth sends GSO packets)
netns_set_rate() {
  local rate=${1:-} i dev ns bps burst
  for i in 1 2; do
    ns=$(ns_name "$i"); dev=$(ns_if "$i")
    if [[ -z "$rate" || "$rate" == none ]]; then
      ip -n "$ns" link set "$dev" up
      tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
      continue
    fi
    bps=$(python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)(bit|bps)", sys.argv[1].lower())
if not m: sys.exit("bad rate " + sys.argv[1] + " (use e.g. 200mbit, 1gbit)")
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print(int(v * (8 if m.group(3) == "bps" else 1)))' "$rate") || return 2
    burst=$(( bps / 8 / 500 )); (( burst < 65536 )) && burst=65536
    tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
  done
}
