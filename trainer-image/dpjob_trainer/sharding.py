"""Which samples each rank trains on, step by step: the data half of "equals single device".

This module is pure (no torch): the plan is a function of (dataset size, world size, rank,
per-rank batch, accumulation, seed, epoch), so every rank computes the same global order without
talking to the others, and a resumed run recomputes exactly the order it would have seen.

Semantics (MindSpore's ``num_shards``/``shard_id``):

* Each epoch has one global order: a permutation of ``range(dataset_size)`` seeded by
  ``(seed, epoch)`` (identity when shuffle is off).
* Optimizer step ``k`` of an epoch consumes the *window* ``order[k*W:(k+1)*W]`` with
  ``W = num_shards * batch_size * accum``. Micro-batch ``j`` of the window is its ``j``-th chunk
  of ``G = num_shards * batch_size`` samples, and shard ``r`` takes the ``r``-th contiguous piece
  of that chunk. So ``N`` ranks with batch ``b`` and accumulation ``A`` see, together, exactly the
  samples one process with batch ``N*b*A`` sees in each step: the precondition for the
  equivalence the tests check.
* The uneven tail (``dataset_size % W`` samples) is, by default (``drop_tail=False``), **kept**:
  it is split into ``A`` chunks and each chunk across shards as evenly as possible (sizes differ by
  at most one), so every sample is used exactly once per epoch. A shard whose piece is empty gets
  one *padding* sample with ``num_real == 0``; the trainer weights its loss by zero, so it takes
  part in the all-reduce (DDP needs every rank) without changing the update. The trainer weights
  each piece by ``num_real * N / window_real``, which makes the averaged gradient equal the
  single-device mean over the (smaller) last window. With ``drop_tail=True`` the incomplete
  window is skipped, as ``drop_last`` does; use it for models that cannot take tiny batches
  (BatchNorm).
* Micro-batches run on across epochs: micro-batch ``m`` belongs to step ``m // A``, and step ``s``
  is step ``s % steps_per_epoch`` of epoch ``s // steps_per_epoch``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MicroBatch:
    """This shard's part of one global micro-batch."""

    epoch: int
    step_in_epoch: int
    indices: tuple[int, ...]  # dataset indices to load; one padding index when num_real == 0
    num_real: int  # how many of ``indices`` count (0 for padding)
    global_real: int  # real samples in this micro-batch, summed over all shards
    window_real: int  # real samples in the whole optimizer step (all micro-batches, all shards)


@dataclass
class ShardPlan:
    """Deterministic per-rank batch plan; see the module docstring for the rules."""

    dataset_size: int
    num_shards: int
    shard_id: int
    batch_size: int
    accum: int = 1
    seed: int = 0
    shuffle: bool = True
    drop_tail: bool = False
    _cached_epoch: int = field(default=-1, init=False, repr=False)
    _cached_order: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.dataset_size < 1:
            raise ValueError(f"dataset is empty (size {self.dataset_size}); the task must provide samples")
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if not 0 <= self.shard_id < self.num_shards:
            raise ValueError(f"shard_id must be in [0, {self.num_shards - 1}], got {self.shard_id}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.accum < 1:
            raise ValueError(f"gradient accumulation must be >= 1, got {self.accum}")
        if self.drop_tail and self.dataset_size < self.window_size:
            raise ValueError(
                f"with the tail dropped, dataset size {self.dataset_size} is smaller than one step's global batch "
                f"{self.window_size} (= world size x --batch-size x --grad-accum): no step would ever run; "
                f"lower --batch-size or use --tail keep"
            )

    @property
    def global_batch_size(self) -> int:
        """Samples per micro-batch over all shards."""
        return self.num_shards * self.batch_size

    @property
    def window_size(self) -> int:
        """Samples per optimizer step over all shards and micro-batches."""
        return self.global_batch_size * self.accum

    @property
    def steps_per_epoch(self) -> int:
        full, tail = divmod(self.dataset_size, self.window_size)
        return full if self.drop_tail or tail == 0 else full + 1

    def epoch_order(self, epoch: int) -> list[int]:
        """The global sample order of ``epoch``; identical on every rank."""
        if epoch != self._cached_epoch:
            order = list(range(self.dataset_size))
            if self.shuffle:
                # An integer seed gives the same Mersenne Twister stream on every platform.
                random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._cached_epoch, self._cached_order = epoch, order
        return self._cached_order

    def window_real(self, step: int) -> int:
        """Real samples in optimizer step ``step`` over all shards, without building the order."""
        start = (step % self.steps_per_epoch) * self.window_size
        return min(self.window_size, self.dataset_size - start)

    @staticmethod
    def _piece(total: int, parts: int, index: int) -> tuple[int, int]:
        """Offset and size of piece ``index`` when ``total`` is split as evenly as possible."""
        base, extra = divmod(total, parts)
        return index * base + min(index, extra), base + (1 if index < extra else 0)

    def micro_batch(self, micro_batch: int) -> MicroBatch:
        """This shard's piece of micro-batch ``micro_batch`` (counted from the first epoch)."""
        step, j = divmod(micro_batch, self.accum)
        epoch, k = divmod(step, self.steps_per_epoch)
        order = self.epoch_order(epoch)
        start = k * self.window_size
        window = min(self.window_size, self.dataset_size - start)
        if window == self.window_size:  # full window: fixed-size chunks and pieces
            chunk_lo, chunk = start + j * self.global_batch_size, self.global_batch_size
        else:
            offset, chunk = self._piece(window, self.accum, j)
            chunk_lo = start + offset
        offset, size = self._piece(chunk, self.num_shards, self.shard_id)
        lo = chunk_lo + offset
        if size > 0:
            return MicroBatch(epoch, k, tuple(order[lo : lo + size]), size, chunk, window)
        # Empty piece: one padding sample from this window keeps shapes valid; weight 0.
        return MicroBatch(epoch, k, (order[start],), 0, chunk, window)

    def epoch_indices(self, epoch: int) -> list[int]:
        """Every real index this shard trains on in ``epoch`` (for tests and audits)."""
        first = epoch * self.steps_per_epoch * self.accum
        out: list[int] = []
        for m in range(first, first + self.steps_per_epoch * self.accum):
            mb = self.micro_batch(m)
            out.extend(mb.indices[: mb.num_real])
        return out
