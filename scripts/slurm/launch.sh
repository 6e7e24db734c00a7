#!/usr/bin/env bash
# The body of train.sbatch and train_multinode.sbatch: launches amp_ddp on every task of the
# current SLURM allocation, resumes from the newest checkpoint, and requeues the job after a clean
# stop on a signal (time limit near, preemption drill). Not meant to be run outside an allocation.
#
# Usage (inside a job): launch.sh [CONFIG] [--set key=value ...] [other amp_ddp options]
#
# Environment (all optional):
#   AMP_ROOT          repository root (default: two levels above the submitted script, found with
#                     `scontrol show job`, else $SLURM_SUBMIT_DIR)
#   AMP_BIN           the binary (default $AMP_ROOT/build/amp_ddp)
#   AMP_CONFIG        config when no CONFIG argument is given (default configs/fmnist_mlp_fp16.yaml);
#                     a relative path is looked up in the working directory, then in $AMP_ROOT
#   AMP_OUT_DIR       run.out_dir (default runs/<job name>-<job id>: the same across requeues of
#                     one job; set it to an older job's folder to continue that run in a new job).
#                     A later `--set run.out_dir=...` argument wins; the script reads the effective
#                     one with `amp_ddp --dry-run`.
#   AMP_RESUME        checkpoint.resume (default auto: newest intact checkpoint, or from scratch)
#   AMP_CKPT_INTERVAL checkpoint.interval in steps (default: the config's)
#   AMP_THREADS       CPU threads per rank (default $SLURM_CPUS_PER_TASK when set, else amp_ddp's
#                     default: the node's cores shared among its ranks)
#   AMP_LAUNCHER      srun (default) or mpirun (Open MPI's mpirun inside the allocation)
#   AMP_SRUN_MPI      srun --mpi plugin (default pmix; Open MPI has no SLURM PMI2 support)
#   AMP_SRUN_ARGS     extra srun arguments (word-split), e.g. "--cpu-bind=cores"
#   AMP_MPIRUN_ARGS   extra mpirun arguments (word-split), e.g. "--mca btl_tcp_if_include ib0"
#   AMP_GPU_BIND      when the job has GPUs: closest (default: srun --gpus-per-task=1
#                     --gpu-bind=closest), localid (CUDA_VISIBLE_DEVICES=$SLURM_LOCALID per task),
#                     none (every task sees the node's GPUs; amp_ddp takes local rank % count)
#   AMP_REQUEUE       1 (default): after the run stopped early on a signal and exited 0
#                     (summary.json "stopped_early": true), `scontrol requeue` this job; 0: don't
#   AMP_MAX_REQUEUES  give up requeueing after this many restarts (default 100; $SLURM_RESTART_COUNT)
#   AMP_DRY_RUN       1: print the launch command and exit
#
# Signals: amp_ddp checkpoints and stops cleanly on SIGTERM, SIGUSR1 or SIGINT. With srun (default) the
# header's `--signal=TERM@120` (no B: prefix) makes slurmd send SIGTERM to the tasks themselves
# 120 s before the time limit; the batch shell lives on, sees the clean stop and requeues the job.
# With `--signal=B:USR1@120` only this batch shell gets SIGUSR1: it forwards it to srun or mpirun,
# which forward it to every rank (use this with AMP_LAUNCHER=mpirun: a SIGTERM sent to the job
# steps would hit mpirun's orted daemons rather than the ranks). A plain `scancel` terminates the
# batch shell too, so a cancelled job is not requeued (the ranks still write their checkpoint).
set -uo pipefail

log() { echo "[launch $(date +%H:%M:%S)] $*"; }
die() { echo "[launch] error: $*" >&2; exit 2; }

[[ -n "${SLURM_JOB_ID:-}" ]] || die "not inside a SLURM job (submit train.sbatch or train_multinode.sbatch with sbatch)"

# ---- where things are
if [[ -z "${AMP_ROOT:-}" ]]; then
  cmd_path=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -1)
  if [[ -n "$cmd_path" && -f "$(dirname "$cmd_path")/launch.sh" ]]; then
    AMP_ROOT=$(cd "$(dirname "$cmd_path")/../.." && pwd)
  else
    AMP_ROOT=${SLURM_SUBMIT_DIR:-$PWD}
  fi
fi
AMP_BIN=${AMP_BIN:-$AMP_ROOT/build/amp_ddp}
[[ -x "$AMP_BIN" ]] || die "no amp_ddp binary at $AMP_BIN (build it, or set AMP_BIN / AMP_ROOT)"

config=${AMP_CONFIG:-configs/fmnist_mlp_fp16.yaml}
if [[ $# -gt 0 && "$1" != -* ]]; then config=$1; shift; fi
if [[ "$config" != /* && ! -f "$config" && -f "$AMP_ROOT/$config" ]]; then config=$AMP_ROOT/$config; fi
[[ -f "$config" ]] || die "config $config not found (in $PWD or $AMP_ROOT)"

# ---- amp_ddp arguments: the script's defaults first, so the caller's --set arguments win
out_dir=${AMP_OUT_DIR:-runs/${SLURM_JOB_NAME:-amp_ddp}-${SLURM_JOB_ID}}
args=(--set "run.out_dir=$out_dir" --set "checkpoint.resume=${AMP_RESUME:-auto}")
[[ -n "${AMP_CKPT_INTERVAL:-}" ]] && args+=(--set "checkpoint.interval=$AMP_CKPT_INTERVAL")
threads=${AMP_THREADS:-${SLURM_CPUS_PER_TASK:-}}
if [[ -n "$threads" ]]; then
  args+=(--set "run.threads=$threads")
  export OMP_NUM_THREADS=$threads
fi
args+=("$@")

# The effective out_dir (a --set run.out_dir in "$@" or the config may decide): ask amp_ddp.
# --dry-run does not start MPI; hide SLURM's step variables from it all the same.
resolved=$(env -u SLURM_STEP_ID -u SLURM_STEPID "$AMP_BIN" "$config" "${args[@]}" --dry-run 2>&1) ||
  { echo "$resolved" >&2; die "the config does not resolve (see above)"; }
eff_out=$(sed -n 's/^  out_dir: "\(.*\)"$/\1/p' <<<"$resolved" | head -1)
if [[ -z "$eff_out" ]]; then
  eff_out=runs/$(sed -n 's/^  name: "\(.*\)"$/\1/p' <<<"$resolved" | head -1)
fi

# ---- the launch command
ntasks=${SLURM_NTASKS:-1}
nnodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
gpus_on_node=${SLURM_GPUS_ON_NODE:-0}
[[ "$gpus_on_node" =~ ^[0-9]+$ ]] || gpus_on_node=0
launcher=${AMP_LAUNCHER:-srun}
bind=${AMP_GPU_BIND:-closest}
wrap=()
case "$launcher" in
  srun)
    cmd=(srun "--mpi=${AMP_SRUN_MPI:-pmix}" --kill-on-bad-exit=1 "--ntasks=$ntasks")
    # 22.05 srun does not inherit --cpus-per-task from the batch job: pass it on.
    [[ -n "${SLURM_CPUS_PER_TASK:-}" ]] && cmd+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
    if ((gpus_on_node > 0)); then
      case "$bind" in
        closest) cmd+=(--gpus-per-task=1 --gpu-bind=closest) ;;
        localid) wrap=(bash -c 'export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID; exec "$@"' amp_task) ;;
        none) ;;
        *) die "AMP_GPU_BIND must be closest, localid or none, not $bind" ;;
      esac
    fi
    # shellcheck disable=SC2206
    cmd+=(${AMP_SRUN_ARGS:-})
    ;;
  mpirun)
    tpn=$((ntasks / nnodes))
    cmd=(mpirun -np "$ntasks" --map-by "ppr:${tpn}:node" --bind-to none)
    [[ -n "${OMP_NUM_THREADS:-}" ]] && cmd+=(-x OMP_NUM_THREADS)
    if ((gpus_on_node > 0)) && [[ "$bind" == localid ]]; then
      wrap=(bash -c 'export CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK; exec "$@"' amp_task)
    fi
    # shellcheck disable=SC2206
    cmd+=(${AMP_MPIRUN_ARGS:-})
    ;;
  *) die "AMP_LAUNCHER must be srun or mpirun, not $launcher" ;;
esac
cmd+=("${wrap[@]}" "$AMP_BIN" "$config" "${args[@]}")

if ((gpus_on_node > 0)) && ((ntasks / nnodes != gpus_on_node)); then
  log "warning: $((ntasks / nnodes)) tasks per node but $gpus_on_node GPUs per node (one rank per GPU is the intent)"
fi
log "job $SLURM_JOB_ID (${SLURM_JOB_NAME:-}) restart ${SLURM_RESTART_COUNT:-0} on $nnodes node(s) [${SLURM_JOB_NODELIST:-?}], $ntasks task(s), ${gpus_on_node} GPU(s)/node, out_dir $eff_out"
log "command: ${cmd[*]}"
[[ "${AMP_DRY_RUN:-0}" == 1 ]] && exit 0

# ---- run it in the background so that a signal to this shell (B:USR1, B:TERM) can be forwarded.
# The first SIGUSR1, SIGTERM or SIGINT goes to the launcher as SIGUSR1 (mpirun forwards SIGUSR1 and
# waits for the ranks; on SIGTERM or SIGINT it would kill them about a second later, checkpoint
# or not); a second one goes as SIGTERM (stop at once).
forwarded=0
forward() {
  forwarded=$((forwarded + 1))
  if ((forwarded == 1)); then
    log "got SIG$1: forwarding SIGUSR1 to the ranks (checkpoint and stop)"; kill -s USR1 "$child" 2>/dev/null
  else
    log "got SIG$1 again: forwarding SIGTERM (stop at once)"; kill -s TERM "$child" 2>/dev/null
  fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
trap 'forward INT' INT
"${cmd[@]}" &
child=$!
ranks=()
while kill -0 "$child" 2>/dev/null; do  # polled: a trap runs between two looks
  while read -r r; do [[ " ${ranks[*]} " == *" $r "* ]] || ranks+=("$r"); done < <(pgrep -P "$child" 2>/dev/null)
  sleep 0.2 &  # a wait that a signal interrupts (during a plain sleep two signals arrive as one)
  wait $! 2>/dev/null
done
rc=0
wait "$child" 2>/dev/null || rc=$?
trap - USR1 TERM INT
# Ranks the launcher started on this node and left behind (mpirun returns as soon as it gave up
# on them): wait, so that a requeued job never finds a checkpoint half written (at most 60 s).
for ((i = 0; i < 300; ++i)); do
  alive=0
  for r in "${ranks[@]}"; do kill -0 "$r" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.2
done
log "amp_ddp finished with exit code $rc"

summary=$eff_out/summary.json
stopped=0
[[ -f "$summary" ]] && grep -q '"stopped_early": *true' "$summary" && stopped=1
if ((rc == 0 && stopped)); then
  restarts=${SLURM_RESTART_COUNT:-0}
  if [[ "${AMP_REQUEUE:-1}" == 1 ]] && ((restarts < ${AMP_MAX_REQUEUES:-100})); then
    how="signal to the tasks"; ((forwarded)) && how="signal forwarded by the batch shell"
    log "stopped early with a checkpoint ($how): requeueing job $SLURM_JOB_ID to continue"
    if scontrol requeue "$SLURM_JOB_ID"; then
      sleep 5   # SLURM ends this batch step now; nothing after this line is expected to run
      exit 0
    fi
    log "scontrol requeue failed; resubmit with AMP_OUT_DIR=$eff_out to continue"
  else
    log "stopped early with a checkpoint; not requeueing (AMP_REQUEUE=${AMP_REQUEUE:-1}, restart $restarts)"
  fi
fi
exit "$rc"
