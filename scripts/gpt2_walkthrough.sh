#!/usr/bin/env bash
# The GPT-2 workflow of docs/gpt2.md, every step in order: Debian's fortunes -> GPT-2 BPE token
# shards (amp_ddp prepare) -> 2 ranks train a small GPT on them in FP16 -> a sample from the
# checkpoint -> its weights exported as safetensors -> their validation loss from amp_ddp eval on 2
# ranks and, where Debian's python3-torch is installed (scripts/peer_env.sh installs it; --torch
# here does too), from PyTorch. Idempotent set-up. Nothing earlier is deleted: shards already in
# data/fortunes_gpt2 (a complete set, with its fortunes_info.json) are used as they are, an earlier
# run in runs/gpt2_fortunes_fp16 moves to its previous/<id>/ (amp_ddp does that), and the exported
# weights are named by the run's id (runs/gpt2_fortunes_fp16/model_<id>.safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/gpt2_walkthrough.sh [--torch]   (--torch: also install Debian's python3-torch)"; }
torch=0
for a in "$@"; do
  case "$a" in
    --torch) torch=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpt2_walkthrough.sh: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
  esac
done
scripts/setup.sh --main --gpt2
((torch)) && source scripts/peer_env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
CFG=configs/gpt2_fortunes_fp16.yaml
RUN=runs/gpt2_fortunes_fp16
set -x
[ -f data/fortunes_gpt2/fortunes_info.json ] ||
  build/amp_ddp prepare $(grep -o '/usr/share/games/fortunes/[a-z-]*$' configs/gpt_fortunes_fp16.yaml) \
      --doc-separator % -o data/fortunes_gpt2 --name fortunes
scripts/mpirun.sh -np 2 build/amp_ddp "$CFG"
CKPT=$(ls "$RUN"/checkpoints/ckpt_step*.bin | tail -1)
WEIGHTS=$RUN/model_$(sed -n 's/.*"run_id": *"\([0-9a-f]*\)".*/\1/p' "$RUN/run.json").safetensors
build/amp_ddp sample "$CKPT" --prompt "Linux is" --tokens 40
build/amp_ddp export "$CKPT" --format safetensors -o "$WEIGHTS"
scripts/mpirun.sh -np 2 build/amp_ddp eval "$CFG" --set model.init_from="$WEIGHTS" --set precision.compute=fp32
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 scripts/torch_gpt2_eval.py --weights "$WEIGHTS" --heads 4 --seq-len 64 \
      --tokens 'data/fortunes_gpt2/fortunes_val_*.bin'
else
  set +x
  echo "PyTorch's evaluation skipped: Debian's python3-torch is not installed (run with --torch to install it)"
fi
