"""Which rows each rank trains on under MindSpore's ``num_shards``/``shard_id``; pure.

MindSpore's dataset sharding without shuffling is *strided*: shard ``r`` of ``n`` holds rows
``r, r+n, r+2n, ...`` (its DistributedSampler), and ``batch(b, drop_remainder=True)`` cuts that
list into consecutive batches. So step ``k`` of shard ``r`` trains on rows ``k*n*b + r + n*j``
(``j < b``), and the union over shards is exactly the rows ``[k*n*b, (k+1)*n*b)``: the batch one
process with batch ``n*b`` trains on at step ``k``. That is the data half of "N ranks equal one
device"; the tests check it against the rows the real pipeline delivered.

Exactness needs every shard to be the same length, so the dataset size must be a multiple of
the world size (MindSpore would otherwise pad shards by repeating rows); the tail of a shard
that does not fill a batch is dropped, the same on every rank, so all ranks take the same number
of steps per epoch and no all-reduce waits for a rank that has run out of data.
"""

from __future__ import annotations


class ShardError(ValueError):
    """The dataset cannot be split exactly; the message says which number to change."""


def check_shardable(dataset_size: int, num_shards: int, batch_size: int) -> None:
    """Raise ShardError unless every shard is equal and holds at least one batch."""
    if num_shards < 1 or batch_size < 1:
        raise ShardError(f"world size and --batch-size must be >= 1, got {num_shards} and {batch_size}")
    if dataset_size % num_shards:
        raise ShardError(f"dataset size {dataset_size} is not a multiple of the world size {num_shards}: "
                         f"MindSpore would pad the shards with repeated rows; choose --dataset-size accordingly")
    if dataset_size // num_shards < batch_size:
        raise ShardError(f"each of the {num_shards} shards holds {dataset_size // num_shards} rows, fewer than "
                         f"--batch-size {batch_size}: no step would run")


def steps_per_epoch(dataset_size: int, num_shards: int, batch_size: int) -> int:
    """Full batches per shard per epoch (the remainder of each shard is dropped)."""
    return (dataset_size // num_shards) // batch_size


def shard_rows(dataset_size: int, num_shards: int, shard_id: int) -> list[int]:
    """The rows of shard ``shard_id``, in the order the unshuffled pipeline yields them."""
    if not 0 <= shard_id < num_shards:
        raise ShardError(f"shard_id must be in [0, {num_shards - 1}], got {shard_id}")
    return list(range(shard_id, dataset_size, num_shards))


def step_rows(step: int, dataset_size: int, num_shards: int, shard_id: int, batch_size: int) -> list[int]:
    """The rows shard ``shard_id`` trains on in optimizer step ``step`` (0-based, across epochs)."""
    k = step % steps_per_epoch(dataset_size, num_shards, batch_size)
    return shard_rows(dataset_size, num_shards, shard_id)[k * batch_size : (k + 1) * batch_size]


def global_step_rows(step: int, dataset_size: int, num_shards: int, batch_size: int) -> list[int]:
    """Every shard's rows of ``step`` together, sorted: what one process with batch n*b sees."""
    rows: list[int] = []
    for shard in range(num_shards):
        rows.extend(step_rows(step, dataset_size, num_shards, shard, batch_size))
    return sorted(rows)
