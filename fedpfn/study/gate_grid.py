"""The alignment gate's grid: the regimes its sweep runs and the flags every cell shares.

scripts/alignment_sweep.py runs a regime's cells (`python -m fedpfn.analysis.lmc` with these flags)
into OUT/<regime>/seed<k>; fedpfn/study/gate_page.py reads them back and names their settings on
docs/alignment.md. Kept apart from the reading so the sweep starts without the statistics' imports.
"""

from __future__ import annotations

from fedpfn.core.provenance import CHECKOUT

OUT = CHECKOUT / "runs" / "alignment"
COMMON = [
    "--dataset", "fmnist", "--models", "2", "--arms", "plain,shared,independent,diff-init",
    "--anchor-ratio", "0.4", "--momentum", "0.9", "--weight-decay", "5e-4", "--batch-size", "64",
    "--points", "11", "--where", "union", "--held-out", "0.2", "--device", "cpu",
]  # fmt: skip
REGIMES: dict[str, list[str]] = {  # name -> the flags that set it apart, cheapest first
    "mlp-same-init": ["--model", "mlp", "--split", "same-data", "--start", "init", "--lr", "0.1",
                      "--epochs", "3", "--train-subset", "10000"],
    "mlp32-same-init": ["--model", "mlp", "--width", "32", "--split", "same-data", "--start", "init",
                        "--lr", "0.1", "--epochs", "3", "--train-subset", "10000"],
    "cnn-same-init": ["--model", "cnn", "--split", "same-data", "--start", "init", "--lr", "0.1",
                      "--epochs", "3", "--train-subset", "10000"],
    "cnn-dirichlet-init": ["--model", "cnn", "--split", "dirichlet", "--alpha", "0.1", "--start", "init",
                           "--lr", "0.1", "--epochs", "3", "--train-subset", "10000"],
    "cnn-same-trained1": ["--model", "cnn", "--split", "same-data", "--start", "trained:1", "--lr", "0.1",
                          "--epochs", "3", "--train-subset", "10000"],
    "resnet20-same-init": ["--model", "resnet20", "--split", "same-data", "--start", "init", "--lr", "0.1",
                           "--epochs", "2", "--train-subset", "4000", "--bn-batches", "8"],
}  # fmt: skip


def changed(flags: list[str], flag: str, value: str) -> list[str]:
    """`flags` with `flag`'s value replaced (or the pair added): a regime one setting away."""
    if flag not in flags:
        return [*flags, flag, value]
    at = flags.index(flag) + 1
    return [*flags[:at], value, *flags[at + 1 :]]


CNN = REGIMES["cnn-same-init"]
REGIMES.update({  # cnn-same-init with one setting changed: is the regime the step, the ratio, the granularity?
    "cnn-same-init-lr0.01": changed(CNN, "--lr", "0.01"),
    "cnn-same-init-lr0.03": changed(CNN, "--lr", "0.03"),
    "cnn-same-init-lr0.06": changed(CNN, "--lr", "0.06"),  # plain's step scaled as the anchored arms' free 60 %
    "cnn-same-init-r0.1": changed(CNN, "--anchor-ratio", "0.1"),
    "cnn-same-init-r0.2": changed(CNN, "--anchor-ratio", "0.2"),
    "cnn-same-init-r0.6": changed(CNN, "--anchor-ratio", "0.6"),
    "cnn-same-init-neuron": changed(CNN, "--granularity", "neuron"),  # FedPNU's anchors: whole units
})

ONE_CNN_CELL = "a CNN cell, 4 arms x 2 models under every matcher, took 10-30 min of one core here"
NOT_RUN: dict[str, str] = {  # why a regime the sweep defines has no cells yet: said on the page
    "resnet20-same-init": f"waits for a GPU session, none lent yet ({ONE_CNN_CELL}; the BatchNorm model costs more)",
    **dict.fromkeys(("cnn-same-init-r0.1", "cnn-same-init-r0.2", "cnn-same-init-r0.6", "cnn-same-init-neuron"),
                    f"queued after the bridge regimes and the lr sweep, which say first whether the regime is "
                    f"the step ({ONE_CNN_CELL})"),
}  # fmt: skip
