"""Failure categories shared by every stage.

Categories follow the root-cause buckets that large-training reports use (Meta's Llama 3 paper,
Table 5: faulty GPU, GPU HBM, software bug, network, host maintenance ...) and NVIDIA's XID catalog.
`interrupting` says whether the fault stops a synchronous training job: application-caused XIDs
(13, 31, 43, 45) and warnings do not take a node out, so interruption rates leave them out.
"""

from __future__ import annotations

from enum import StrEnum


class FailureCategory(StrEnum):
    GPU_FELL_OFF_BUS = "gpu_fell_off_bus"
    GPU_MEMORY = "gpu_memory"
    GPU_MEMORY_WARNING = "gpu_memory_warning"
    NVLINK = "nvlink"
    GPU_FIRMWARE = "gpu_firmware"
    NCCL_TIMEOUT = "nccl_timeout"
    NETWORK = "network"
    HOST = "host"
    STORAGE = "storage"
    SOFTWARE = "software"
    APPLICATION = "application"
    UNKNOWN_XID = "unknown_xid"
    OTHER = "other"

    @property
    def interrupting(self) -> bool:
        return self not in _NON_INTERRUPTING


_NON_INTERRUPTING = frozenset({FailureCategory.APPLICATION, FailureCategory.GPU_MEMORY_WARNING})

INTERRUPTING_CATEGORIES: tuple[str, ...] = tuple(c.value for c in FailureCategory if c.interrupting)
