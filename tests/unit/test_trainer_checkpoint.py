"""Checkpoint files are replaced atomically: a crash mid-write never leaves a partial checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpjob_trainer.checkpoint import atomic_write, checkpoint_path, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.unit


def test_crash_during_write_keeps_the_previous_file_and_leaves_no_temp(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    atomic_write(path, lambda fh: fh.write(b"complete old checkpoint"))

    def dies_half_way(fh):
        fh.write(b"half of a new")
        raise KeyboardInterrupt  # e.g. the pod's grace period ended

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, dies_half_way)
    assert Path(path).read_bytes() == b"complete old checkpoint"
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_stale_temp_files_of_a_killed_writer_are_cleaned_up(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    stale = tmp_path / "checkpoint.pt.tmp-12345"
    stale.write_bytes(b"garbage from a SIGKILLed writer")
    atomic_write(path, lambda fh: fh.write(b"new"))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def test_readers_only_ever_see_complete_files(tmp_path):
    """The new content appears only at os.replace: before it, the old file is intact."""
    path = str(tmp_path / "checkpoint.pt")
    atomic_write(path, lambda fh: fh.write(b"v1"))
    seen_during_write = []

    def write_v2(fh):
        fh.write(b"v2-partial")
        seen_during_write.append(Path(path).read_bytes())
        fh.write(b"-rest")

    atomic_write(path, write_v2)
    assert seen_during_write == [b"v1"]
    assert Path(path).read_bytes() == b"v2-partial-rest"


def test_save_and_load_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    assert load_checkpoint(str(tmp_path)) is None
    state = {"step": 7, "model": {"w": torch.arange(4.0)}, "task": "linear"}
    path = save_checkpoint(str(tmp_path / "ck"), state)
    assert path == checkpoint_path(str(tmp_path / "ck"))
    loaded = load_checkpoint(str(tmp_path / "ck"))
    assert loaded["step"] == 7 and loaded["task"] == "linear"
    assert torch.equal(loaded["model"]["w"], torch.arange(4.0))
