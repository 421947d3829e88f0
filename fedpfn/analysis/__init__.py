"""The instruments: reading finished runs and measuring them (statistics and Holm, reports and
figures, weight and activation matching, permutation specs, REPAIR, loss barriers, decomposition).

Built on `fedpfn.core` only: it never starts a federation or trains a model, so the runtime may
measure with it (fedpfn.runtime.alignment, the reports of `fedpfn compare`). The commands that
train models to measure them (`fedpfn align`, `soup`, `cold`, `pretrain`) are fedpfn.experiments."""
