#!/usr/bin/env bash
# The measured comparison in docs/results.md: Fashion-MNIST, the CNN, 20 clients, three seeds.
#   scripts/results_fmnist.sh [alpha0.5|alpha0.1|all] [OUT_ROOT]
# alpha 0.5: FedAvg vs FedPFN vs FedPNU; alpha 0.1: every client algorithm, with and without anchors.
# Sized for a 2-core machine (about 90 s a run there): 5 clients a round, 15 rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
OUT=${2:-runs/results}
PY=${PYTHON:-.venv/bin/python}
COMMON=(--dataset fmnist --model cnn --num-clients 20 --clients-per-round 5 --rounds 15
        --local-epochs 1 --batch-size 64 --lr 0.05 --partition dirichlet --seeds 0,1,2)

if [[ $PART == alpha0.5 || $PART == all ]]; then
  "$PY" run_sim.py --compare fedavg,fedpfn,fedpnu --alpha 0.5 "${COMMON[@]}" --out "$OUT/fmnist-a0.5"
fi
if [[ $PART == alpha0.1 || $PART == all ]]; then
  "$PY" run_sim.py --compare fedavg,fedpfn,fedpnu,fedprox,scaffold,feddyn \
    --alpha 0.1 "${COMMON[@]}" --out "$OUT/fmnist-a0.1"
fi
