"""Failure categories shared by every stage.

Categories follow the root-cause buckets that large-training reports use (Meta's Llama 3 paper,
Table 5: faulty GPU, GPU HBM, software bug, network, host maintenance ...) and NVIDIA's XID catalog,
plus the root causes of the public HPC failure studies (LANL, Schroeder & Gibson 2006; BlueGene/L):

* ``host`` is the non-GPU part of a GPU node (CPU, DIMM, PSU, BMC); ``hardware`` is the node
  hardware of fleets *without* GPUs (LANL's "Hardware", BlueGene/L compute-chip interrupts), kept
  apart so a GPU fleet's host share is not compared with a whole CPU node's;
* ``facilities`` (power, cooling, UPS), ``human_error`` (operator mistakes) and ``undetermined``
  (the operators could not tell, or recorded no cause) are LANL's own buckets.

`interrupting` says whether the fault stops a synchronous training job: application-caused XIDs
(13, 31, 43, 45) and warnings do not take a node out, so interruption rates leave them out. The
four study categories are interrupting: they name the *cause* of an outage record (every LANL
record is a node that went down), so leaving any out would undercount outages, and
``undetermined`` in particular is 11% of LANL's outages, not noise.
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
    HARDWARE = "hardware"
    STORAGE = "storage"
    SOFTWARE = "software"
    APPLICATION = "application"
    FACILITIES = "facilities"
    HUMAN_ERROR = "human_error"
    UNDETERMINED = "undetermined"
    UNKNOWN_XID = "unknown_xid"
    OTHER = "other"

    @property
    def interrupting(self) -> bool:
        return self not in _NON_INTERRUPTING


_NON_INTERRUPTING = frozenset({FailureCategory.APPLICATION, FailureCategory.GPU_MEMORY_WARNING})

INTERRUPTING_CATEGORIES: tuple[str, ...] = tuple(c.value for c in FailureCategory if c.interrupting)
