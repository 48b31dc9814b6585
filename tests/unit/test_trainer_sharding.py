"""Sharding: every sample exactly once per epoch across ranks, and N ranks see what one process sees."""

from __future__ import annotations

from collections import Counter

import pytest

from dpjob_trainer.sharding import ShardPlan

pytestmark = pytest.mark.unit

COMBOS = [  # (dataset size, world size, per-rank batch, gradient accumulation)
    (1, 1, 1, 1), (10, 1, 3, 1), (16, 4, 2, 1), (17, 4, 2, 1), (19, 3, 3, 1), (5, 8, 1, 1), (100, 7, 4, 1),
    (2048, 2, 32, 1), (7, 2, 16, 1), (19, 2, 4, 2), (19, 1, 4, 2), (23, 3, 2, 4), (5, 2, 2, 4),
]


def plans(size, world, batch, accum=1, **kw):
    return [ShardPlan(size, world, r, batch, accum=accum, **kw) for r in range(world)]


@pytest.mark.parametrize(("size", "world", "batch", "accum"), COMBOS)
@pytest.mark.parametrize("epoch", [0, 3])
def test_every_sample_exactly_once_per_epoch_across_ranks(size, world, batch, accum, epoch):
    seen = Counter(i for plan in plans(size, world, batch, accum, seed=7) for i in plan.epoch_indices(epoch))
    assert sorted(seen) == list(range(size))
    assert set(seen.values()) == {1}


@pytest.mark.parametrize(("size", "world", "batch", "accum"), COMBOS)
def test_each_step_sees_the_samples_of_one_process_with_the_whole_global_batch(size, world, batch, accum):
    ranks = plans(size, world, batch, accum, seed=3)
    single = ShardPlan(size, 1, 0, world * batch * accum, seed=3)
    assert single.steps_per_epoch == ranks[0].steps_per_epoch
    for step in range(2 * single.steps_per_epoch):  # two epochs, crossing the boundary
        pieces = [plan.micro_batch(step * accum + j) for j in range(accum) for plan in ranks]
        together = [i for mb in pieces for i in mb.indices[: mb.num_real]]
        reference = single.micro_batch(step)
        assert together == list(reference.indices)
        assert {mb.window_real for mb in pieces} == {reference.window_real} == {ranks[0].window_real(step)}
        # Every rank has something to run (DDP needs all ranks in every all-reduce).
        assert all(len(mb.indices) >= 1 for mb in pieces)
        for j in range(accum):
            chunk = [plan.micro_batch(step * accum + j) for plan in ranks]
            assert sum(mb.num_real for mb in chunk) == chunk[0].global_real


def test_uneven_tail_is_split_evenly_and_empty_pieces_get_a_zero_weight_padding_sample():
    ranks = plans(19, 3, 3, shuffle=False)  # global batch 9: steps of 9, 9, 1 samples
    last = [plan.micro_batch(2) for plan in ranks]
    assert [mb.num_real for mb in last] == [1, 0, 0]
    assert [len(mb.indices) for mb in last] == [1, 1, 1]
    assert last[0].indices == (18,)
    assert [plan.micro_batch(2).num_real for plan in plans(17, 4, 2, shuffle=False)] == [1, 0, 0, 0]
    assert [plan.micro_batch(1).num_real for plan in plans(23, 4, 4, shuffle=False)] == [2, 2, 2, 1]
    # With accumulation the tail window (3 samples, 2 micro-batches) is split 2 + 1.
    acc = plans(19, 1, 4, accum=2, shuffle=False)[0]
    assert [acc.micro_batch(m).num_real for m in (4, 5)] == [2, 1]
    assert acc.micro_batch(4).window_real == 3


def test_drop_tail_skips_the_incomplete_global_batch():
    ranks = plans(19, 2, 4, seed=1, drop_tail=True)
    assert ranks[0].steps_per_epoch == 2
    seen = Counter(i for plan in ranks for i in plan.epoch_indices(0))
    assert len(seen) == 16 and set(seen.values()) == {1}
    with pytest.raises(ValueError, match="smaller than one step's global batch"):
        ShardPlan(5, 2, 0, 4, drop_tail=True)


def test_order_is_deterministic_reshuffled_per_epoch_and_identity_without_shuffle():
    a, b = ShardPlan(50, 2, 0, 5, seed=11), ShardPlan(50, 2, 0, 5, seed=11)
    assert a.epoch_order(4) == b.epoch_order(4)  # same on every rank and after a restart
    assert a.epoch_order(0) != a.epoch_order(1)
    assert ShardPlan(50, 2, 0, 5, seed=12).epoch_order(0) != a.epoch_order(0)
    assert ShardPlan(50, 2, 0, 5, shuffle=False).epoch_order(3) == list(range(50))


def test_linear_task_layout_matches_oneflow_two_rank_example():
    r0, r1 = plans(4, 2, 2, shuffle=False)
    assert r0.micro_batch(0).indices == (0, 1) and r1.micro_batch(0).indices == (2, 3)
    assert ShardPlan(4, 1, 0, 4, shuffle=False).micro_batch(0).indices == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset_size": 0}, "empty"),
        ({"num_shards": 0}, "num_shards"),
        ({"shard_id": 2}, "shard_id"),
        ({"batch_size": 0}, "batch size"),
        ({"accum": 0}, "accumulation"),
    ],
)
def test_invalid_plans_are_rejected(kwargs, message):
    args = {"dataset_size": 10, "num_shards": 2, "shard_id": 0, "batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        ShardPlan(**args)
