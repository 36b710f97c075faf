"""What a run writes: rollout records and the trace, metrics.jsonl and the trackers, the run directory."""
