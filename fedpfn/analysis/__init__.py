"""Reading finished runs and analysing them: statistics, reports, figures, fusion and LMC.

Built on `fedpfn.core` only: it never starts a federation."""
