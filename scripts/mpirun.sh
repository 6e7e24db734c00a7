#!/usr/bin/env bash
# mpirun with the settings this project needs on any machine (allowed as root, more ranks than
# cores allowed, fast local transports), and a clean stop on Ctrl-C or SIGTERM.
# Usage: scripts/mpirun.sh -np 2 build/amp_ddp CONFIG [...]
#
# Open MPI's mpirun (4.1) answers SIGINT and SIGTERM by sending SIGTERM to every rank, waiting
# about a second, then SIGKILL, and exits 1: a rank writing its checkpoint is killed half way, and
# the exit code says failure. It forwards SIGUSR1 and SIGUSR2 to the ranks and waits for them.
# So this wrapper runs mpirun in a session of its own (a terminal's Ctrl-C reaches this script
# only) and translates: the first SIGINT or SIGTERM becomes SIGUSR1 for the ranks (amp_ddp
# finishes its step, rank 0 writes a checkpoint, every rank exits 0, so does this script); a
# second one is passed on as SIGTERM (stop at once). Either way the script returns only once
# mpirun and every rank it started on this node have exited, so a following job never finds a
# checkpoint half written. mpirun's exit code is this script's.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
# Containers often forbid the cross-memory-attach syscalls vader would use for large messages.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

signals=0
on_signal() {
  signals=$((signals + 1))
  if ((signals == 1)); then
    echo "mpirun.sh: SIG$1: asking every rank to finish its step, checkpoint and stop (again to stop at once)" >&2
    kill -USR1 "$pid" 2>/dev/null
  elif [[ -z "$(pgrep -P "$pid" 2>/dev/null)" ]]; then
    echo "mpirun.sh: SIG$1 again: the ranks have already stopped" >&2  # their clean stop stands
  else
    echo "mpirun.sh: SIG$1 again: stopping the ranks at once" >&2
    kill -TERM "$pid" 2>/dev/null
  fi
}
# A pause that a signal interrupts: bash runs a trap only between commands, so during a plain
# `sleep` two signals would arrive as one.
pause() {
  sleep "$1" &
  wait $! 2>/dev/null
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

setsid mpirun "$@" &
pid=$!
ranks=()
while kill -0 "$pid" 2>/dev/null; do
  # The ranks on this node are mpirun's children: remembered, to be waited for after it exits.
  while read -r child; do
    [[ " ${ranks[*]} " == *" $child "* ]] || ranks+=("$child")
  done < <(pgrep -P "$pid" 2>/dev/null)
  pause 0.2
done
rc=0
while :; do  # a trap interrupts wait; the exit code is mpirun's only once it has exited
  wait "$pid" 2>/dev/null
  rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
for ((i = 0; i < 300; ++i)); do  # at most 60 s for ranks mpirun left behind
  alive=0
  for r in "${ranks[@]}"; do kill -0 "$r" 2>/dev/null && alive=1; done
  ((alive)) || break
  pause 0.2
done
exit "$rc"
