#!/usr/bin/env bash
# mpirun across the namespace "nodes" of up.sh: started inside node 1 (with its hostname), with
# node 2 reached through rsh_agent.sh; TCP between the nodes restricted to the veth subnet (by CIDR:
# interface names differ per node), shared memory within a node.
#
#   scripts/netns/run.sh PROGRAM [ARGS...]
#   AMP_NETNS_NODES=2 AMP_NETNS_PPN=2 scripts/netns/run.sh build/amp_ddp configs/x.yaml --set ...
#
# Environment: AMP_NETNS_NODES (1 or 2, default 2), AMP_NETNS_PPN ranks per node (default 2),
# AMP_NETNS_MPIRUN_ARGS extra mpirun arguments (word-split, e.g. "--display-map"),
# AMP_NETNS_PREFIX, AMP_NETNS_SUBNET (see common.sh). OMP_NUM_THREADS is passed to the ranks
# (default 1). Runs as root (OMPI_ALLOW_RUN_AS_ROOT is set).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
nodes=${AMP_NETNS_NODES:-2}
ppn=${AMP_NETNS_PPN:-2}
[[ $# -ge 1 ]] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
((nodes >= 1 && nodes <= netns_nodes)) || { echo "netns/run.sh: AMP_NETNS_NODES must be 1..$netns_nodes" >&2; exit 2; }
n1=$(ns_name 1)
ns_exists "$n1" || { echo "netns/run.sh: $n1 does not exist (run scripts/netns/up.sh)" >&2; exit 1; }
hosts=""
for ((i = 1; i <= nodes; i++)); do hosts+="${hosts:+,}$(ns_addr "$i"):$ppn"; done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cmd=(mpirun --host "$hosts" -np $((nodes * ppn)) --map-by ppr:"$ppn":node --bind-to none
     --oversubscribe
     --mca plm_rsh_agent "$here/rsh_agent.sh"
     --mca pml ob1 --mca btl self,vader,tcp
     --mca btl_vader_single_copy_mechanism none
     --mca btl_tcp_if_include "$netns_cidr" --mca oob_tcp_if_include "$netns_cidr"
     --mca mpi_yield_when_idle 1
     -x OMP_NUM_THREADS -x AMP_NETNS_PREFIX)
# shellcheck disable=SC2206
cmd+=(${AMP_NETNS_MPIRUN_ARGS:-} "$@")
q=$(printf '%q ' "${cmd[@]}")
exec ip netns exec "$n1" unshare --uts bash -c "hostname $n1; exec $q"
