"""The ``transformer`` task keeps the contract of every built-in task: N ranks equal one process
(no batch coupling), a resumed run ends bit-identical to an uninterrupted one, the report says
what ran, and a bad ``--model-width`` is one line to fix. Tiny widths: a few seconds on CPU."""

from __future__ import annotations

import pytest

from tests.support.trainer import run_trainer_in_process

pytestmark = pytest.mark.unit
torch = pytest.importorskip("torch")

from dpjob_trainer.tasks import TaskError, build_task  # noqa: E402 - needs torch, skipped above without it
from dpjob_trainer.transformer import SEQ_LEN  # noqa: E402


def _grads(model, loss):
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_mean_of_per_rank_gradients_is_the_single_process_gradient(ranks):
    task = build_task("transformer", seed=0, dataset_size=16, model_width=16)
    tokens, targets = task.dataset[list(range(16))]
    whole = _grads(task.model, task.loss_fn(task.model(tokens), targets))
    shards = [_grads(task.model, task.loss_fn(task.model(x), y))
              for x, y in zip(tokens.chunk(ranks), targets.chunk(ranks), strict=True)]
    for g, parts in zip(whole, zip(*shards, strict=True), strict=True):
        torch.testing.assert_close(torch.stack(parts).mean(0), g, rtol=1e-4, atol=1e-6)


def test_the_data_and_model_depend_only_on_the_seed():
    a, b = (build_task("transformer", seed=3, dataset_size=8, model_width=16, world_size=w) for w in (1, 4))
    assert torch.equal(a.dataset[list(range(8))][0], b.dataset[list(range(8))][0])
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))
    assert a.dataset[[0]][0].shape == (1, SEQ_LEN)


def test_a_resumed_run_ends_identical_to_an_uninterrupted_one(tmp_path):
    args = ["--task", "transformer", "--model-width", "16", "--dataset-size", "24", "--batch-size", "4"]
    for name in ("straight", "first", "resumed"):
        (tmp_path / name).mkdir()
    _, _, straight = run_trainer_in_process(tmp_path / "straight", [*args, "--steps", "8"])
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    assert run_trainer_in_process(tmp_path / "first", [*args, "--steps", "4", *ckpt])[0] == 0
    code, _, resumed = run_trainer_in_process(tmp_path / "resumed", [*args, "--steps", "8", *ckpt])
    assert code == 0 and resumed["resumed_from_step"] == 4 and resumed["task"] == "transformer"
    assert resumed["param_sha256"] == straight["param_sha256"]
    assert resumed["final_loss"] == straight["final_loss"]


@pytest.mark.parametrize(("task", "width", "needle"), [
    ("transformer", 12, "--model-width must be a multiple of 8"),
    ("transformer", 0, "--model-width must be a multiple of 8"),
    ("mlp", 64, "--model-width applies only to --task transformer"),
])
def test_a_width_that_cannot_work_is_refused_with_the_flag_named(task, width, needle):
    with pytest.raises(TaskError, match=needle):
        build_task(task, seed=0, model_width=width)


def test_the_reports_parameter_hash_is_the_documented_one_and_quick_for_millions_of_parameters():
    import hashlib
    import time

    from dpjob_trainer.report import param_sha256

    model = build_task("transformer", seed=0, dataset_size=8).model  # width 256: 3.3M parameters
    expected = hashlib.sha256()
    for p in model.parameters():  # docs/trainer.md: float32 bytes in parameters() order
        expected.update(p.detach().float().numpy().tobytes())
    started = time.perf_counter()
    assert param_sha256(model) == expected.hexdigest()
    assert time.perf_counter() - started < 5  # element by element, this took about 40 s
