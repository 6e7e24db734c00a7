#!/usr/bin/env bash
# The main job: set up (packages + build), then train the default model on 2 MPI ranks.
# Idempotent. Extra arguments go to amp_ddp (e.g. --set run.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/mpirun.sh -np 2 build/amp_ddp configs/fmnist_mlp_fp16.yaml --dry-run "$@"
