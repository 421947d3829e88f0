#!/usr/bin/env bash
# The measured comparisons in docs/results.md: Fashion-MNIST, 20 clients, three seeds.
#   scripts/results_fmnist.sh [alpha0.5|alpha0.1|baselines|all] [OUT_ROOT]
# alpha0.5 / alpha0.1: FedAvg vs FedPFN vs FedPNU with the paper's CNN (issue: anchors).
# baselines: every client algorithm at Dirichlet(0.1) with the MLP (5x cheaper than the CNN).
# Sized for a 2-core machine: 5 clients a round, 15 rounds (CNN about 90 s a run there).
set -euo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
OUT=${2:-runs/results}
PY=${PYTHON:-.venv/bin/python}
COMMON=(--dataset fmnist --num-clients 20 --clients-per-round 5 --rounds 15
        --local-epochs 1 --batch-size 64 --lr 0.05 --partition dirichlet --seeds 0,1,2)

if [[ $PART == alpha0.5 || $PART == all ]]; then
  "$PY" run_sim.py --compare fedavg,fedpfn,fedpnu --model cnn --alpha 0.5 "${COMMON[@]}" --out "$OUT/fmnist-a0.5"
fi
if [[ $PART == alpha0.1 || $PART == all ]]; then
  "$PY" run_sim.py --compare fedavg,fedpfn,fedpnu --model cnn --alpha 0.1 "${COMMON[@]}" --out "$OUT/fmnist-a0.1"
fi
if [[ $PART == baselines || $PART == all ]]; then
  "$PY" run_sim.py --compare fedavg,fedprox,scaffold,feddyn,fedpfn,fedpnu,fedpfn+scaffold --model mlp \
    --alpha 0.1 "${COMMON[@]}" --out "$OUT/fmnist-mlp-a0.1"
fi
