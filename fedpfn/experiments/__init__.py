"""The experiments: commands that train models in order to measure them, above the runtime.

`fedpfn align` (lmc: loss barriers and permutations between models trained apart), `fedpfn soup`
(model soups with and without shared anchors), `fedpfn cold` (ColD fusion's evaluation of a
study's federated runs) and `fedpfn pretrain` (the start they fine-tune), with what they share
(command: settings, refusals and output files; bounds: what a run would cost, refused before it
starts). They measure with fedpfn.analysis, the instruments; the runtime imports none of them."""
