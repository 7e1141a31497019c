"""Failure categories shared by every stage.

Categories follow the root-cause buckets that large-training reports use (Meta's Llama 3 paper,
Table 5: faulty GPU, GPU HBM, software bug, network, host maintenance ...) and NVIDIA's XID catalog,
plus the root causes of the public HPC failure studies (LANL, Schroeder & Gibson 2006; BlueGene/L):

* ``gpu_hardware`` is a GPU that failed without saying how ("Faulty GPU", Llama 3's largest
  bucket; a failed DCGM diagnostic); the specific GPU classes are for what names its mode:
  ``gpu_fell_off_bus`` only for a GPU that dropped off the PCIe bus (Xid 79, the driver's "GPU is
  lost", Titan's OTB), ``gpu_memory`` for HBM/ECC, ``nvlink``, ``gpu_firmware``. A generic ticket
  filed under one of them would name a mode nobody saw;
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

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class FailureCategory(StrEnum):
    GPU_HARDWARE = "gpu_hardware"
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


# --- the user's taxonomy -----------------------------------------------------------------------
# Fleets name their failure categories in their own words (a ticket system's "Faulty GPU", a fault
# manager's "Parameter Plane Cable"). Every category is stored verbatim; its *class* is one
# FailureCategory value, found by (first match wins): the user's map, this synonym table, an
# ``Xid N`` in the text (the Xid catalog's class, see pipeline.store.taxonomy), else ``other``.
# Keys are compared in normal form (:func:`normal_form`: lower case, letters and digits only), so
# "Link Down", "link-down" and "LINK_DOWN" are one key. Each FailureCategory value is its own class
# (so "GPU memory" is gpu_memory without an entry here).
SYNONYMS: dict[str, FailureCategory] = {
    # a GPU named as failed, not how: generic GPU hardware (the class name "GPU hardware" maps itself)
    **{
        name: FailureCategory.GPU_HARDWARE
        for name in (
            "GPU",
            "Faulty GPU",
            "Bad GPU",
            "Failed GPU",
            "Defective GPU",
            "GPU failure",
            "GPU fault",
            "GPU error",
            "GPU hardware failure",
        )
    },
    # what names a GPU that dropped off the bus: NVIDIA's Xid 79 text and the driver's
    # NV_ERR_GPU_IS_LOST ("GPU is lost", as nvidia-smi prints it for such a GPU)
    **{
        name: FailureCategory.GPU_FELL_OFF_BUS
        for name in (
            "GPU fell off the bus",
            "GPU has fallen off the bus",
            "Fallen off the bus",
            "Fell off the bus",
            "GPU off the bus",
            "GPU lost",
            "GPU is lost",
        )
    },
    **{
        name: FailureCategory.GPU_MEMORY
        for name in ("HBM", "GPU HBM", "HBM3", "ECC", "GPU ECC", "Uncorrectable ECC")
    },
    "NVSwitch": FailureCategory.NVLINK,
    "NCCL": FailureCategory.NCCL_TIMEOUT,
    **{
        name: FailureCategory.NETWORK
        for name in (
            "NIC",
            "Link Down",
            "Link Flap",
            "InfiniBand",
            "IB",
            "RoCE",
            "Ethernet",
            "Network Switch",
            "Parameter Plane Cable",
            "Optical Module",
            "Transceiver",
        )
    },
    **{
        name: FailureCategory.HOST
        for name in ("Power Supply", "PSU", "CPU", "DIMM", "Memory", "Host Memory", "BMC", "Motherboard")
    },
    # a burn-in or stress test that a node fails says the node's hardware is bad, not which part;
    # in a GPU fleet that is the node's own hardware, LANL's bucket for node hardware
    "Stress Test Failure": FailureCategory.HARDWARE,
    **{name: FailureCategory.STORAGE for name in ("Disk", "SSD", "NVMe", "Filesystem", "Lustre")},
    **{name: FailureCategory.FACILITIES for name in ("Power", "Cooling", "Power Outage", "UPS")},
    **{name: FailureCategory.SOFTWARE for name in ("Driver", "Kernel", "Software Bug", "OS")},
    # reasons Slurm itself sets when it drains or downs a node (SchedMD/slurm: "Kill task failed" is
    # ESLURMD_KILL_TASK_FAILED in src/common/slurm_errno.c; "Not responding" in
    # src/slurmctld/ping_nodes.c; "Node unexpectedly rebooted" in slurmctld's node_mgr.c)
    **{name: FailureCategory.SOFTWARE for name in ("Kill task failed", "Prolog error", "Epilog error")},
    "Node unexpectedly rebooted": FailureCategory.HOST,
    # Kubernetes node problems: node-problem-detector's kernel monitor (kubernetes/node-problem-detector
    # config/kernel-monitor.json), the kubelet's Rebooted (pkg/kubelet/events/event.go), the node
    # lifecycle controller's NodeNotReady and the Ready condition's reasons (kubelet, node controller).
    # OOMKilling: the kernel's OOM killer ended a process for its memory use, not a node fault.
    **{
        name: FailureCategory.SOFTWARE
        for name in ("KernelOops", "TaskHung", "KernelDeadlock", "DockerHung", "UnregisterNetDevice")
    },
    **{
        name: FailureCategory.STORAGE
        for name in ("ReadonlyFilesystem", "FilesystemIsReadOnly", "Ext4Error", "IOError", "XfsHasShutdown")
    },
    **{name: FailureCategory.HOST for name in ("Rebooted", "MemoryReadError")},
    "OOMKilling": FailureCategory.APPLICATION,
    **{
        name: FailureCategory.UNDETERMINED
        for name in ("NodeNotReady", "KubeletNotReady", "NodeStatusUnknown")
    },
    # the EKS node monitoring agent's condition reasons (aws/eks-node-monitoring-agent
    # pkg/reasons/reasons.go; its NvidiaXID<N>Error / Warning reasons go by the Xid catalog)
    "NvidiaNVLinkError": FailureCategory.NVLINK,
    "NvidiaDoubleBitError": FailureCategory.GPU_MEMORY,
    "NvidiaPageRetirement": FailureCategory.GPU_MEMORY_WARNING,
    # a GPU missing from the node (DCGM's count against /dev or the instance type's: it may never
    # have enumerated at boot, so not necessarily one that fell off the bus), a GPU's PCIe error,
    # a failed DCGM diagnostic: the GPU is bad, the mode unnamed
    **{
        name: FailureCategory.GPU_HARDWARE
        for name in ("NvidiaDeviceCountMismatch", "NvidiaPCIeError", "DCGMError", "DCGMDiagnosticFailure")
    },
    "NeuronHBMUncorrectableError": FailureCategory.HARDWARE,
    **{name: FailureCategory.SOFTWARE for name in ("SoftLockup", "KernelBug", "ForkFailedOutOfPIDs")},
    **{name: FailureCategory.NETWORK for name in ("InterfaceNotUp", "InterfaceNotRunning", "IPAMDNotReady")},
    # cloud host events (pipeline.readers.cloud_events): EC2 scheduled event codes (API reference,
    # InstanceStatusEvent) and Compute Engine system events (audit log methodName); each concerns
    # the host the instance runs on; the planned attribute tells maintenance from failure
    **{
        name: FailureCategory.HOST
        for name in (
            "system-reboot",
            "system-maintenance",
            "instance-reboot",
            "instance-stop",
            "instance-retirement",
            "compute.instances.hostError",
            "compute.instances.terminateOnHostMaintenance",
            "compute.instances.migrateOnHostMaintenance",
        )
    },
    **{
        name: FailureCategory.UNDETERMINED
        for name in ("unavailable", "unknown", "N/A", "none", "not determined")
    },
    # what a training job's own log says (pipeline.readers.training_log): the torchelastic agent sees
    # its workers fail, not why; a rendezvous is the restart (the reader flags it non-interrupting)
    **{
        name: FailureCategory.UNDETERMINED
        for name in ("worker_group_failed", "worker_group_unhealthy", "rendezvous_complete")
    },
    # a node that stopped answering, or a bare Slurm state with no reason: the cause is not known
    **{
        name: FailureCategory.UNDETERMINED
        for name in ("Not responding", "DOWN", "DRAIN", "DRAINED", "FAIL", "NO_RESPOND")
    },
}


# A name that no key matches whole is read word by word ("NVLink error", "ECC uncorrectable",
# "InfiniBand link down", "Kernel panic"): these words only qualify a failure and are dropped, then
# the longest run of the remaining words that is a class or synonym names the class, if every run
# of that length names the same one (taxonomy.classify; the note names the words it went by).
QUALIFIER_WORDS = frozenset(
    "error errors failure failures failed fault faults faulty issue issues problem problems bad broken "  # noqa: SIM905
    "defective dead detected alert critical fatal event crash crashed".split()
)
# Words too vague to name a class on their own: "Power" (a PSU or the building's?), "Memory" (a
# DIMM, HBM or a leak?), "OS" (any software).
VAGUE_WORDS = frozenset({"power", "memory", "os"})


def normal_form(text: str) -> str:
    """Case- and punctuation-insensitive key: "Link-Down", "link down" -> "linkdown"."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


@dataclass(frozen=True)
class CategoryMap:
    """The user's taxonomy overrides (``[categories]`` in failcast.toml, ``--category-map``).

    ``classes``: category (in :func:`normal_form`) -> class. ``interrupting``: category or class
    (normal form) -> whether it stops a job; a category's own entry wins over its class's. The map
    is part of what the warehouse's events and incidents were classified with (:attr:`fingerprint`):
    a changed map reclassifies every stored event on the next ingest or run.
    """

    classes: Mapping[str, FailureCategory] = field(default_factory=dict)
    interrupting: Mapping[str, bool] = field(default_factory=dict)

    def merged(self, other: CategoryMap) -> CategoryMap:
        """This map with ``other``'s entries on top (command-line flags over the config file)."""
        return CategoryMap({**self.classes, **other.classes}, {**self.interrupting, **other.interrupting})

    @property
    def fingerprint(self) -> str:
        """The map and the built-in synonyms as one string: equal strings classify alike."""
        return json.dumps(
            {
                "classes": sorted((k, v.value) for k, v in self.classes.items()),
                "interrupting": sorted(self.interrupting.items()),
                "synonyms": sorted((normal_form(k), v.value) for k, v in SYNONYMS.items()),
                "words": [sorted(QUALIFIER_WORDS), sorted(VAGUE_WORDS)],
            },
            separators=(",", ":"),
        )

    def to_document(self) -> dict[str, str | dict[str, str | bool]]:
        """As a ``[categories]`` table (keys in normal form), for ``failcast run --print-config``."""
        document: dict[str, str | dict[str, str | bool]] = {k: v.value for k, v in self.classes.items()}
        for key, flag in self.interrupting.items():
            entry = {"class": document[key]} if key in self.classes else {}
            document[key] = {**entry, "interrupting": flag}
        return document


def class_named(name: str) -> FailureCategory:
    """The class named ``name`` (a FailureCategory value, any case); ValueError naming the choices."""
    try:
        return FailureCategory(name.strip().lower())
    except ValueError:
        choices = ", ".join(c.value for c in FailureCategory)
        raise ValueError(f"{name.strip()!r} is not a failure class; use one of {choices}") from None
