"""The step's one small all-reduce and what every rank reads from it.

Before the update, every rank adds its slots to one short vector and all-reduces it (sum):

* ``LOSS``: its weighted loss sum (the mean over ranks is logged, exported and reported);
* ``STOP``: 1 if it got SIGTERM (any vote stops every rank after this same step);
* ``LOSS_NONFINITE``: 1 if its own loss is NaN/Inf;
* ``GRAD_NONFINITE``: 1 if the reduced gradient's norm is NaN/Inf (identical on every rank);
* in a job of two or more ranks, one slot per rank for its own time of the previous step, only its
  own non-zero (stragglers.py).

Two values that are already identical on every rank ride along unreduced in the same copy to the
host (the step's one synchronisation): the gradient norm and the fp16 loss scale.

Every rank computes the same sums, so every rank takes the same decision; deciding from local
values alone would let a rank whose own loss is NaN skip while the others update, and DDP ranks
would silently diverge. This module turns the numbers into that decision; it imports no torch.

The fp16 rule: an Inf/NaN gradient under a loss scale of at least 1 is the scaler's overflow (the
scaler skips the update and halves the scale; not a ``--nonfinite`` event). A loss that is not
finite always counts, and so does a non-finite gradient once the scaler has backed off below 1:
gradients that overflow even unscaled are not a calibration matter, and that bounds a run of
silent scaler skips to about 17 steps from the default scale of 65536.
"""

from __future__ import annotations

from dataclasses import dataclass

LOSS, STOP, LOSS_NONFINITE, GRAD_NONFINITE = range(4)
REDUCED_SLOTS = 4  # then the own-time slots, then the unreduced gradient norm and loss scale


@dataclass(frozen=True)
class Agreement:
    """One step's outcome, identical on every rank."""

    loss: float  # the mean loss over ranks
    stop_votes: float  # ranks that got SIGTERM
    nonfinite_ranks: int  # ranks whose loss or reduced gradient is NaN/Inf (> 0: the policy decides)
    scaler_skip: bool  # fp16: the gradient overflowed under the loss scale; the update is skipped
    grad_norm: float  # L2 norm of the reduced gradient, before clipping
    own_seconds: list[float]  # every rank's own time of the previous step (empty when not collected)

    @property
    def apply_update(self) -> bool:
        return self.nonfinite_ranks == 0 and not self.scaler_skip


def read_agreement(values: list[float], world_size: int, own_slots: int, *, loss_scaling: bool) -> Agreement:
    """``values``: the reduced slots, ``own_slots`` own times, then the gradient norm and the scale."""
    if len(values) != REDUCED_SLOTS + own_slots + 2:
        raise ValueError(f"expected {REDUCED_SLOTS + own_slots + 2} values, got {len(values)}")
    grad_norm, scale = values[-2:]
    bad_losses = round(values[LOSS_NONFINITE])
    bad_gradient = values[GRAD_NONFINITE] > 0
    overflow = bad_gradient and loss_scaling and scale >= 1.0
    counted_gradient = bad_gradient and not overflow
    return Agreement(
        loss=values[LOSS] / world_size,
        stop_votes=values[STOP],
        nonfinite_ranks=world_size if counted_gradient else bad_losses,
        scaler_skip=overflow and bad_losses == 0,
        grad_norm=grad_norm,
        own_seconds=values[REDUCED_SLOTS:REDUCED_SLOTS + own_slots],
    )
