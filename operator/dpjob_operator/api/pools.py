"""Node pools as data: where rank pods of one accelerator kind go and what device they request.

Pure: the pure layers (builders, reconcile) read pools from here; ``config.py`` only loads them
from the operator's config file, so nothing pure imports a module that reads files or the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PoolConfig:
    """How rank pods of one accelerator kind are placed and what device they request."""

    device_resource: str | None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    default_backend: str = "gloo"
    # Extra env for every rank on this pool (e.g. NCCL_SOCKET_IFNAME); user env still wins.
    env: Mapping[str, str] = field(default_factory=dict)


DEFAULT_POOLS: dict[str, PoolConfig] = {
    "gpu": PoolConfig(
        device_resource="nvidia.com/gpu",
        node_selector={"nvidia.com/gpu.present": "true"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        default_backend="nccl",
        env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
    ),
    "npu": PoolConfig(
        device_resource="huawei.com/Ascend910",
        node_selector={"accelerator": "huawei-Ascend910"},
        tolerations=({"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"},),
        default_backend="hccl",
        env={"HCCL_CONNECT_TIMEOUT": "600"},
    ),
    "cpu": PoolConfig(device_resource=None, default_backend="gloo"),
}
