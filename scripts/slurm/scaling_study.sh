#!/usr/bin/env bash
# Weak-scaling study on SLURM: submits scripts/slurm/train_multinode.sbatch once per node count
# (and tasks-per-node count), waits for the jobs, and prints a Markdown table from their
# summary.json files: ranks, global batch, step time, samples/s, efficiency vs the smallest run,
# communication time per step and the share of it hidden behind backward.
#
#   scripts/slurm/scaling_study.sh [CONFIG] [--set key=value ...]      # submit, wait, print table
#   scripts/slurm/scaling_study.sh --gather STUDY_DIR                  # table of a finished study
#
#   AMP_STUDY_NODES="1 2 4 8" AMP_STUDY_TASKS_PER_NODE=8 \
#   AMP_STUDY_SBATCH_ARGS="--gpus-per-node=8 --cpus-per-task=16 --time=00:20:00 -p gpu" \
#     scripts/slurm/scaling_study.sh configs/fmnist_mlp_fp16.yaml --set run.steps=2000
#
# The batch per rank stays data.batch_size (weak scaling: the global batch grows with the ranks),
# so efficiency = (samples/s per rank) / (samples/s per rank of the smallest run). Give a fixed
# run.steps so every run does the same work per rank, and enough steps to amortize start-up
# (samples/s is measured over the training loop only).
#
# Environment:
#   AMP_STUDY_NODES           node counts (default "1 2 4 8")
#   AMP_STUDY_TASKS_PER_NODE  ranks per node, one or more (default 8: one per GPU of an 8-GPU node)
#   AMP_STUDY_DIR             study folder (default runs/scaling-<date-time>): one run folder
#                             n<N>x<G> per job, the job logs, jobs.tsv and table.md
#   AMP_STUDY_SBATCH_ARGS     extra sbatch arguments, word-split (partition, time, GPUs, account)
#   AMP_STUDY_JOB_NAME        job name prefix (default amp_scaling)
#   AMP_STUDY_WAIT            1 (default): wait for the jobs and print the table; 0: submit and
#                             exit (then --gather STUDY_DIR)
#   AMP_STUDY_POLL            seconds between squeue polls (default 10)
#   AMP_STUDY_TIMEOUT         give up waiting after this many seconds (default 86400)
#   AMP_ROOT                  repository root (default: two levels above this script)
#   and every AMP_* variable of scripts/slurm/launch.sh (AMP_BIN, AMP_LAUNCHER, ...): sbatch
#   exports the environment to the jobs. AMP_OUT_DIR is set per job by this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export AMP_ROOT=${AMP_ROOT:-$(cd "$here/../.." && pwd)}

case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --gather|--set) ;;
  -*) echo "scaling_study.sh: unknown option '$1' (--help says what it takes)" >&2; exit 2 ;;
  ?*) [[ -f $1 ]] || { echo "scaling_study.sh: config '$1': no such file" >&2; exit 2; } ;;
esac
if [[ "${1:-}" == --gather ]]; then
  [[ $# -eq 2 ]] || { echo "usage: $0 --gather STUDY_DIR" >&2; exit 2; }
  exec python3 "$here/scaling_table.py" "$2"
fi

study=${AMP_STUDY_DIR:-runs/scaling-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$study/logs"
study=$(cd "$study" && pwd)
name=${AMP_STUDY_JOB_NAME:-amp_scaling}
: >"$study/jobs.tsv"
ids=()
for n in ${AMP_STUDY_NODES:-1 2 4 8}; do
  for g in ${AMP_STUDY_TASKS_PER_NODE:-8}; do
    tag=n${n}x${g}
    # shellcheck disable=SC2086
    id=$(AMP_OUT_DIR=$study/$tag sbatch --parsable --job-name="$name-$tag" --nodes="$n" \
           --ntasks-per-node="$g" --output="$study/logs/%x-%j.out" ${AMP_STUDY_SBATCH_ARGS:-} \
           "$here/train_multinode.sbatch" "$@")
    id=${id%%;*}
    printf '%s\t%s\t%s\t%s\n' "$n" "$g" "$id" "$study/$tag" >>"$study/jobs.tsv"
    ids+=("$id")
    echo "scaling_study: submitted $tag as job $id"
  done
done
if [[ "${AMP_STUDY_WAIT:-1}" != 1 ]]; then
  echo "scaling_study: not waiting; when the jobs are done: $0 --gather $study"
  exit 0
fi

joined=$(IFS=,; echo "${ids[*]}")
deadline=$(( $(date +%s) + ${AMP_STUDY_TIMEOUT:-86400} ))
while :; do
  left=$(squeue -h -j "$joined" -o %i 2>/dev/null | wc -l || true)
  [[ "$left" -eq 0 ]] && break
  if (( $(date +%s) > deadline )); then
    echo "scaling_study: timed out with $left job(s) left; later: $0 --gather $study" >&2
    exit 1
  fi
  sleep "${AMP_STUDY_POLL:-10}"
done
python3 "$here/scaling_table.py" "$study" | tee "$study/table.md"
