"""Sampling: the sampler (KV cache, token draws, stop strings), its decode loop helpers and the sampled sequences."""
