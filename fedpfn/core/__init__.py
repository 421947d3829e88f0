"""The foundation: settings and the run config, seeding, data, models, the local training step,
anchors and the message envelope. Imports nothing of fedpfn above it (only `partitions`)."""
