"""The trainer says "lost a peer" (exit 75) only for errors caused by another rank dying."""

from __future__ import annotations

import pytest

from dpjob_operator.reconcile import rootcause
from dpjob_trainer.peerloss import EXIT_PEER_LOST, is_peer_loss

pytestmark = pytest.mark.unit


class DistNetworkError(RuntimeError):
    """Same name as torch.distributed's: matched by class name, without importing torch."""


@pytest.mark.parametrize("exc, lost", [
    (RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4321"),
     True),
    (RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection reset by peer"), True),
    (RuntimeError("NCCL communicator was aborted on rank 0."), True),
    (DistNetworkError("failed to recv, got 0 bytes"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (RuntimeError("Expected all tensors to be on the same device"), False),
    (ValueError("loss is nan"), False),
])
def test_peer_loss_is_recognised(exc, lost):
    assert is_peer_loss(exc) is lost


def test_the_operator_and_the_trainer_agree_on_the_exit_code():
    assert rootcause.EXIT_PEER_LOST == EXIT_PEER_LOST == 75
