"""``--precision fp32|bf16|fp16``: autocast for the forward pass and, for fp16, loss scaling.

bf16 has float32's range, so autocast alone is enough. fp16 does not: small gradients underflow
to zero and large ones overflow, so the loss is multiplied by a scale before ``backward()`` and
the gradients divided by it again before anything reads them (``torch.amp.GradScaler``). A
scale that was too large shows up as an Inf or NaN gradient; the scaler then halves the scale
and that step's update is skipped. Such a step is the scaler calibrating itself, not a failure
of the run: the loop counts it (``scaler_skipped_steps``) and leaves the ``--nonfinite`` policy
out of it, while a NaN/Inf *loss* is reported as always (see agreement.py for the exact rule).

``--amp`` is the older name of ``--precision bf16``. Where bf16 autocast is not supported (a CUDA
GPU before Ampere) bf16 falls back to float32 with a warning. fp16 works on CUDA and on CPU (torch
autocasts and scales on both); a torch without float16 autocast on the device is refused with one
line at start-up rather than training in float32 under an fp16 label.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def requested_precision(precision: str, amp: bool) -> str:
    """What the flags ask for; ValueError names the flag to change."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be fp32, bf16 or fp16, got {precision!r}")
    if amp and precision == "fp16":
        raise ValueError("--amp means --precision bf16 and cannot be combined with --precision fp16; drop --amp")
    return "bf16" if amp else precision


@dataclass
class Precision:
    """The effective precision of this run and, for fp16, its loss scaler."""

    name: str
    device: torch.device
    scaler: torch.amp.GradScaler | None = None
    _one: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self._one = torch.ones((), device=self.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_DTYPES[self.name])

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the scale in place (on the device), before they are read."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def scale_tensor(self) -> torch.Tensor:
        """The scale this step's backward used, as a device tensor (1 without a scaler). The
        scaler's public ``get_scale()`` reads it to the host, a synchronisation of its own; the
        loop reads it in the step's one existing copy instead."""
        scale = self.scaler._get_scale_async() if self.scaler is not None else None
        return scale if scale is not None else self._one

    def update(self) -> None:
        """After every step, applied or not: back the scale off after an overflow, else grow it."""
        if self.scaler is not None:
            self.scaler.update()


def _bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return device.type in ("cpu", "npu")


def _fp16_autocasts(device: torch.device) -> bool:
    """Whether this torch really computes in float16 under autocast on ``device`` (an older CPU
    autocast only warns and stays in float32)."""
    probe = torch.ones(2, 2, device=device)
    with contextlib.suppress(RuntimeError), torch.autocast(device_type=device.type, dtype=torch.float16):
        return (probe @ probe).dtype == torch.float16
    return False


def setup_precision(requested: str, device: torch.device) -> tuple[Precision, str | None]:
    """The precision to train in on ``device`` and a warning when it is not the one requested."""
    if requested == "bf16" and not _bf16_supported(device):
        return Precision("fp32", device), f"bf16 autocast is not supported on {device}; training in float32"
    if requested == "fp16":
        if not _fp16_autocasts(device):
            raise ValueError(f"--precision fp16: torch {torch.__version__} has no float16 autocast on "
                             f"{device.type}; use --precision bf16 or fp32")
        return Precision("fp16", device, torch.amp.GradScaler(device.type)), None
    return Precision(requested, device), None
