"""Conformance checks of advantage estimators: :func:`check_advantage_estimator`.

An estimator is ``estimator(inputs: AdvantageInputs, **config) -> AdvantageOutputs``, a pure
function over numpy arrays (:mod:`tinker_core.contracts`). The checks (names as in
:class:`ConformanceError`):

* ``call``: it accepts the inputs (with ``values_B_T`` when it needs a critic) and returns.
* ``output``: an :class:`~tinker_core.contracts.AdvantageOutputs` whose ``advantages_B_T`` and
  ``returns_B_T`` are float ``np.ndarray`` of shape ``[B, T]``, finite everywhere, and whose
  ``metrics`` map str to finite real numbers.
* ``mask``: ``advantages_B_T`` is exactly 0 where ``mask_B_T`` is 0 (prompt, env tokens, padding).
* ``purity``: the inputs are not modified.
* ``determinism``: the same inputs give identical outputs.
* ``padding``: extra masked columns on the right do not change the original columns.
* ``group-ids``: group ids are labels: renaming them changes nothing.
* ``permutation``: permuting the rows permutes the outputs (groups need not be contiguous).
* ``group-sizes``: the same groups given as ``group_sizes_G`` (rows group after group, as a batch
  built from :class:`~tinker_core.contracts.TrajectoryGroup` s has them; ``group_ids_B`` then
  derived) give the same outputs. :meth:`AdvantageInputs.group_index` reads either form.
* ``degenerate``: singleton groups, all-equal rewards, all-zero rewards and per-token rewards give
  finite outputs (no NaN from a zero standard deviation).

The batch has ragged prompts and responses, a multi-turn row with a masked hole, a group of
four, a group of two with equal rewards and a group of one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tinker_core.contracts import AdvantageEstimator, AdvantageInputs, AdvantageOutputs
from tinker_core.plugin_entries import EstimatorEntry
from tinker_core.testing._common import (
    Reporter,
    check_metrics,
    resolve_callable,
)

__all__ = ["check_advantage_estimator"]

_RTOL = 1e-9
_ATOL = 1e-12
_PAD = 3

# fmt: off
_MASK_B_T = np.array([
    [0, 0, 1, 1, 1, 1, 0, 0],
    [0, 0, 1, 1, 0, 0, 0, 0],
    [0, 1, 1, 1, 1, 1, 1, 1],
    [0, 0, 0, 1, 0, 0, 1, 1],   # multi-turn: an env observation masked in the middle
    [0, 0, 1, 1, 1, 0, 0, 0],
    [0, 1, 1, 1, 1, 1, 1, 0],
    [0, 0, 0, 1, 1, 1, 0, 0],
], dtype=np.float64)
# fmt: on
_GROUPS_B = np.array([5, 5, 2, 5, 2, 5, 9])
_REWARDS_B = np.array([1.0, 0.0, 0.3, 0.5, 0.3, 1.0, 0.7])


def _inputs(needs_critic: bool, *, rewards_B: np.ndarray | None = None, groups_B: np.ndarray | None = None,
            token_rewards: bool = False) -> AdvantageInputs:
    rng = np.random.default_rng(20240607)
    B, T = _MASK_B_T.shape
    values = rng.uniform(-1.0, 1.0, (B, T)) if needs_critic else None
    tok = None
    if token_rewards:
        tok = np.round(rng.uniform(-0.5, 1.0, (B, T)), 3) * _MASK_B_T
    return AdvantageInputs(
        rewards_B=_REWARDS_B.copy() if rewards_B is None else rewards_B,
        mask_B_T=_MASK_B_T.copy(),
        group_ids_B=_GROUPS_B.copy() if groups_B is None else groups_B,
        token_rewards_B_T=tok,
        values_B_T=values,
    )


def _call(rep: Reporter, fn: AdvantageEstimator, inputs: AdvantageInputs, config: Mapping[str, Any],
          case: str) -> AdvantageOutputs:
    with rep.guard("call", f"on {case}", "accept AdvantageInputs and **config; see tinker_core.contracts"):
        out: AdvantageOutputs = fn(inputs, **config)
    _validate(rep, out, inputs, case)
    return out


def _validate(rep: Reporter, out: object, inputs: AdvantageInputs, case: str) -> None:
    if not isinstance(out, AdvantageOutputs):
        rep.fail("output", f"on {case}: returned {type(out).__name__}, not AdvantageOutputs",
                 "return tinker_core.contracts.AdvantageOutputs(advantages_B_T=..., returns_B_T=...)")
    shape = inputs.mask_B_T.shape
    for name in ("advantages_B_T", "returns_B_T"):
        arr = getattr(out, name)
        if not isinstance(arr, np.ndarray):
            rep.fail("output", f"on {case}: {name} is {type(arr).__name__}, not a numpy array",
                     "estimators work on numpy: return np.ndarray (np.asarray(x, dtype=np.float64))")
        if arr.shape != shape:
            rep.fail("output", f"on {case}: {name} has shape {arr.shape}, expected [B, T] = {shape}",
                     "return one value per token, shaped like inputs.mask_B_T")
        if not np.issubdtype(arr.dtype, np.floating):
            rep.fail("output", f"on {case}: {name} has dtype {arr.dtype}, not a float dtype",
                     "return float arrays (np.float64 or np.float32)")
        bad = ~np.isfinite(arr)
        if bad.any():
            b, t = np.argwhere(bad)[0]
            rep.fail("output", f"on {case}: {name} is not finite at [{b}, {t}] ({arr[b, t]}) and "
                     f"{int(bad.sum())} place(s) in all",
                     "guard divisions (e.g. std + eps; a group of one gets advantage 0) and mask "
                     "before normalising")
    off = (inputs.mask_B_T == 0) & (out.advantages_B_T != 0)
    if off.any():
        b, t = np.argwhere(off)[0]
        rep.fail("mask", f"on {case}: advantages_B_T is {out.advantages_B_T[b, t]} at [{b}, {t}] where "
                 f"mask_B_T is 0 ({int(off.sum())} such place(s))",
                 "multiply the advantages by inputs.mask_B_T before returning")
    check_metrics(rep, out.metrics, case, "float(x)")


def _same(a: AdvantageOutputs, b: AdvantageOutputs, exact: bool) -> str | None:
    for name in ("advantages_B_T", "returns_B_T"):
        x, y = getattr(a, name), getattr(b, name)
        ok = np.array_equal(x, y) if exact else np.allclose(x, y, rtol=_RTOL, atol=_ATOL)
        if not ok:
            diff = np.abs(x - y)
            b_, t_ = np.unravel_index(int(np.argmax(diff)), diff.shape)
            return f"{name}[{b_}, {t_}] is {float(x[b_, t_])!r} vs {float(y[b_, t_])!r}"
    return None


def _snapshot(inputs: AdvantageInputs) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in vars(inputs).items()}


def _check_layouts(rep: Reporter, fn: AdvantageEstimator, base: AdvantageInputs, out: AdvantageOutputs,
                   needs_critic: bool, config: Mapping[str, Any]) -> None:
    """The checks that lay the same batch out differently: ``padding``, ``group-ids``,
    ``permutation`` and ``group-sizes``."""
    # padding: extra masked columns on the right
    padded = AdvantageInputs(
        rewards_B=base.rewards_B.copy(),
        mask_B_T=np.pad(base.mask_B_T, ((0, 0), (0, _PAD))),
        group_ids_B=base.group_ids_B.copy(),
        values_B_T=None if base.values_B_T is None else np.pad(base.values_B_T, ((0, 0), (0, _PAD))),
    )
    out_pad = _call(rep, fn, padded, config, f"the batch padded with {_PAD} masked columns")
    T = base.mask_B_T.shape[1]
    cut = AdvantageOutputs(out_pad.advantages_B_T[:, :T], out_pad.returns_B_T[:, :T])
    diff = _same(out, cut, exact=False)
    if diff:
        rep.fail("padding", f"{_PAD} extra masked columns changed the original ones: {diff}",
                 "compute over masked tokens only (positions past the last response token are "
                 "padding, not part of the episode; use V = 0 after the last response token)")

    # group ids are labels
    relabel = {5: 100, 2: 7, 9: 0}
    out_rel = _call(rep, fn, _inputs(needs_critic, groups_B=np.array([relabel[g] for g in _GROUPS_B])),
                    config, "the batch with group ids renamed")
    diff = _same(out, out_rel, exact=False)
    if diff:
        rep.fail("group-ids", f"renaming the group ids changed the result: {diff}",
                 "use group ids only to tell groups apart (e.g. np.unique(..., return_inverse=True))")

    # permutation equivariance
    perm = np.array([3, 6, 0, 5, 2, 1, 4])
    shuffled = _rows(base, perm, group_ids_B=base.group_ids_B[perm])
    out_perm = _call(rep, fn, shuffled, config, "the batch with rows permuted")
    diff = _same(AdvantageOutputs(out.advantages_B_T[perm], out.returns_B_T[perm]), out_perm, exact=False)
    if diff:
        rep.fail("permutation", f"permuting the rows did not just permute the result: {diff}",
                 "do not assume a group's rows are contiguous or ordered; select them by group id")

    # groups given as sizes (rows group after group, as a rollout's TrajectoryGroups make them)
    order = np.argsort(base.group_ids_B, kind="stable")
    grouped = _rows(base, order, group_sizes_G=np.unique(base.group_ids_B[order], return_counts=True)[1])
    out_sizes = _call(rep, fn, grouped, config, "the batch with groups given as group_sizes_G")
    diff = _same(AdvantageOutputs(out.advantages_B_T[order], out.returns_B_T[order]), out_sizes, exact=False)
    if diff:
        rep.fail("group-sizes", f"the same groups given as group_sizes_G changed the result: {diff}",
                 "read the groups with inputs.group_index() (it handles group_ids_B and group_sizes_G)")


def _rows(base: AdvantageInputs, rows: np.ndarray, **groups: np.ndarray) -> AdvantageInputs:
    """``base``'s rows in the order ``rows``, its groups given by ``groups`` (ids or sizes)."""
    return AdvantageInputs(
        rewards_B=base.rewards_B[rows], mask_B_T=base.mask_B_T[rows],
        values_B_T=None if base.values_B_T is None else base.values_B_T[rows], **groups,
    )


def check_advantage_estimator(
    estimator: str | Callable[..., Any],
    *,
    needs_critic: bool | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Check an advantage estimator against the :mod:`tinker_core.contracts` contract.

    Args:
        estimator: a registered name (looked up with
            :func:`tinker_core.registry.get_advantage_estimator`) or the callable itself.
        needs_critic: whether to pass ``values_B_T``. None takes it from the registry entry
            (names) or from a ``needs_critic`` attribute of the callable (default False).
        config: keyword arguments passed to every call (e.g. ``{"gamma": 1.0}``).

    Raises:
        ConformanceError: naming the estimator, the failed check and the fix.
    """
    fn, label, entry = resolve_callable(estimator, "advantage_estimators")
    if needs_critic is None:
        needs_critic = entry.needs_critic if isinstance(entry, EstimatorEntry) else bool(getattr(fn, "needs_critic", False))
    config = dict(config or {})
    rep = Reporter(label)
    critic = " (with values_B_T)" if needs_critic else " (values_B_T=None)"

    base = _inputs(needs_critic)
    before = _snapshot(base)
    out = _call(rep, fn, base, config, "the reference batch" + critic)
    for key, value in vars(base).items():
        old = before[key]
        same = (old is None and value is None) or (
            old is not None and value is not None and np.array_equal(np.asarray(old), np.asarray(value))
        )
        if not same:
            rep.fail("purity", f"the estimator modified inputs.{key}",
                     "treat the inputs as read-only: compute into new arrays (x = x.copy() first)")

    again = _call(rep, fn, _inputs(needs_critic), config, "the same batch again")
    diff = _same(out, again, exact=True)
    if diff:
        rep.fail("determinism", f"two calls on equal inputs differ: {diff}",
                 "do not use unseeded randomness or state kept between calls")

    _check_layouts(rep, fn, base, out, needs_critic, config)

    # degenerate batches must stay finite
    B = _MASK_B_T.shape[0]
    for case, inputs in (
        ("all rewards equal", _inputs(needs_critic, rewards_B=np.full(B, 1.0))),
        ("all rewards zero", _inputs(needs_critic, rewards_B=np.zeros(B))),
        ("every group of size 1", _inputs(needs_critic, groups_B=np.arange(B))),
        ("per-token rewards", _inputs(needs_critic, token_rewards=True)),
        ("one sequence", AdvantageInputs(rewards_B=np.array([0.5]), mask_B_T=_MASK_B_T[:1].copy(), group_ids_B=np.array([0]),
                                         values_B_T=None if base.values_B_T is None else base.values_B_T[:1])),
    ):
        try:
            _call(rep, fn, inputs, config, case)
        except Exception as e:
            if getattr(e, "check", None) in ("call", "output"):
                e.check = "degenerate"  # type: ignore[attr-defined]
                e.args = (e.message,)  # type: ignore[attr-defined]
            raise
