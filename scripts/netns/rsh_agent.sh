#!/usr/bin/env bash
# Open MPI's rsh agent for the namespace "nodes" (--mca plm_rsh_agent <this>): instead of ssh HOST
# CMD, runs CMD in the namespace that owns HOST's address, with that namespace's hostname
# (unshare --uts: ranks of different nodes must not share a hostname, or their shared-memory
# segments in /dev/shm collide). Environment: AMP_NETNS_PREFIX (ampnode).
set -euo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done   # ssh-style options, if any
[[ $# -ge 2 ]] || { echo "rsh_agent: usage: $0 HOST COMMAND..." >&2; exit 2; }
host=$1; shift
prefix=${AMP_NETNS_PREFIX:-ampnode}
ns=""
for cand in $(ip netns list | awk '{print $1}'); do
  [[ "$cand" == "$prefix"* ]] || continue
  if [[ "$cand" == "$host" ]] || ip -n "$cand" -o -4 addr show | grep -q " inet $host/"; then ns=$cand; break; fi
done
[[ -n "$ns" ]] || { echo "rsh_agent: no namespace $prefix* has address $host" >&2; exit 255; }
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
