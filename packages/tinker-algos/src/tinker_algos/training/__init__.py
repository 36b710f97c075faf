"""Training: the trainer primitives, the gradient pass (with loss aggregation), shared prefixes, KL, checkpoints."""
