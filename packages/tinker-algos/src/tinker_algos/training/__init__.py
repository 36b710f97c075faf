"""Training: the trainer primitives, the gradient pass, shared prefixes, loss aggregation, KL, zero-advantage rows, checkpoints."""
