#!/usr/bin/env bash
# The main job: set up what it runs (its packages, and amp_ddp alone: scripts/setup.sh --main), then
# train a small GPT (4 layers, width 128, context 64 bytes) on English text (Debian's fortunes) in
# FP16 with dynamic loss scaling on 2 MPI ranks (16 windows per rank per step), ending with its
# validation loss and a generated sample; then plot the run to <run folder>/plot.png
# (scripts/plot_runs.py). Idempotent.
# Extra arguments go to amp_ddp (e.g. --set run.epochs=1); the run folder is the resolved
# run.out_dir (default runs/<run.name>), so overriding it moves the plot too. The exit code is
# training's; a failed plot only prints a warning. --help prints this and, once amp_ddp is built,
# its options, and sets nothing up.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do  # help sets nothing up: this script's usage, and amp_ddp's where it is built
  case "$a" in
    -h|--help)
      sed -n '2,/^set -euo pipefail$/p' scripts/run_main.sh | sed -e '$d' -e 's/^# \{0,1\}//'
      echo
      if [ -x build/amp_ddp ]; then
        build/amp_ddp --help
      else
        echo "amp_ddp's own options: build/amp_ddp --help, once this script (or scripts/setup.sh) has built it."
      fi
      exit 0 ;;
  esac
done
scripts/setup.sh --main
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
train=(build/amp_ddp configs/gpt_fortunes_fp16.yaml "$@")
rc=0
scripts/mpirun.sh -np 2 "${train[@]}" || rc=$?
((rc == 0)) || exit "$rc"

for a in "$@"; do   # nothing was trained: nothing to plot
  case "$a" in --dry-run|--version) exit 0 ;; esac
done
# The run folder as amp_ddp resolves it: run.out_dir, or runs/<run.name> when it is empty.
run_dir=$("${train[@]}" --dry-run 2>/dev/null | python3 -c '
import json, sys
section, run = None, {}
for line in sys.stdin:
    if line[:1].isalpha():
        section = line.split(":")[0]
    elif section == "run" and line.startswith("  ") and not line.startswith("   "):
        key, _, value = line.strip().partition(": ")
        run[key] = value
out_dir, name = (json.loads(run.get(k) or "\"\"") for k in ("out_dir", "name"))
print(out_dir or ("runs/" + name if name else ""))
' 2>/dev/null) || run_dir=""
if [ -z "$run_dir" ]; then
  echo "run_main: warning: could not resolve the run folder (amp_ddp --dry-run); no plot" >&2
elif ! python3 scripts/plot_runs.py "$run_dir" -o "$run_dir/plot.png"; then
  echo "run_main: warning: plotting $run_dir failed (see above); the training itself succeeded" >&2
fi
exit 0
