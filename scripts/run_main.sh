#!/usr/bin/env bash
# The main job: set up (packages + build), then train the Fashion-MNIST MLP in FP16 with dynamic
# loss scaling on 2 MPI ranks (64 samples per rank: the same global batch of 128 as one rank with
# the config's 128). Idempotent. Extra arguments go to amp_ddp (e.g. --set run.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
scripts/mpirun.sh -np 2 build/amp_ddp configs/fmnist_mlp_fp16.yaml --set data.batch_size=64 "$@"
