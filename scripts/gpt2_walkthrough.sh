#!/usr/bin/env bash
# The GPT-2 workflow of docs/gpt2.md, every step in order: Debian's fortunes -> GPT-2 BPE token
# shards (amp_ddp prepare) -> 2 ranks train a small GPT on them in FP16 -> a sample from the
# checkpoint -> its weights exported as safetensors -> their validation loss from amp_ddp eval on 2
# ranks and, where Debian's python3-torch is installed (scripts/peer_env.sh installs it; --torch
# here does too), from PyTorch. Idempotent set-up; the shards and the run are made afresh in
# data/fortunes_gpt2 and runs/gpt2_fortunes_fp16 (both removed first).
set -euo pipefail
cd "$(dirname "$0")/.."
torch=0
[ "${1:-}" = "--torch" ] && torch=1
scripts/setup.sh --main --gpt2
((torch)) && source scripts/peer_env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
CFG=configs/gpt2_fortunes_fp16.yaml
RUN=runs/gpt2_fortunes_fp16
rm -rf data/fortunes_gpt2 "$RUN" "$RUN.safetensors"
set -x
build/amp_ddp prepare $(grep -o '/usr/share/games/fortunes/[a-z-]*$' configs/gpt_fortunes_fp16.yaml) \
    --doc-separator % -o data/fortunes_gpt2 --name fortunes
scripts/mpirun.sh -np 2 build/amp_ddp "$CFG"
CKPT=$(ls "$RUN"/checkpoints/ckpt_step*.bin | tail -1)
build/amp_ddp sample "$CKPT" --prompt "Linux is" --tokens 40
build/amp_ddp export "$CKPT" --format safetensors -o "$RUN.safetensors"
scripts/mpirun.sh -np 2 build/amp_ddp eval "$CFG" --set model.init_from="$RUN.safetensors" --set precision.compute=fp32
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 scripts/torch_gpt2_eval.py --weights "$RUN.safetensors" --heads 4 --seq-len 64 \
      --tokens 'data/fortunes_gpt2/fortunes_val_*.bin'
else
  set +x
  echo "PyTorch's evaluation skipped: Debian's python3-torch is not installed (run with --torch to install it)"
fi
