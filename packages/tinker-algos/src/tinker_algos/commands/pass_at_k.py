"""pass@k: the unbiased estimator of the chance that at least one of ``k`` samples is right, and
the ``k`` an evaluation reports (:mod:`tinker_algos.commands.evaluation`)."""

from __future__ import annotations

from math import prod


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", computed as a product
    so large ``n`` cannot overflow.)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_ks(samples: int) -> list[int]:
    """The ``k`` of the pass@k reported for ``samples`` samples a problem: 1, powers of 2, and ``samples``."""
    ks = {1, samples}
    j = 2
    while j < samples:
        ks.add(j)
        j *= 2
    return sorted(ks)
