"""The CLI commands tinker-algos registers (train, eval, export, model, compare, fork, runs, doctor checks) and the evaluation they run."""
