"""NVIDIA XID catalog: code -> failcast category, whether it interrupts training, recommended action.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer;
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose "Resolution Bucket
(Immediate Action)" column gives the action names used here (IGNORE, RESTART_APP, RESET_GPU,
RESTART_BM = reboot the bare-metal node, CONTACT_SUPPORT, ...); NVIDIA's dynamic page retirement
notes (48 DBE, 63 page retired / row remapped, 64 retirement failed); NVIDIA Health Validation Xid
checks (46, 48 critical -> drain and reset). Re-check against the catalog spreadsheet when a new
GPU generation lands: only codes listed here get a category, every other code is kept as
``unknown_xid`` and counted, never dropped.

``interrupting`` follows the category (``FailureCategory.interrupting``) except where a code says
otherwise: application-caused codes (13, 31, 43, 45, 69) and warnings (63 row remap pending, 92 high
single-bit ECC rate) do not take a node out, and 154 only restates the recovery wanted for an
earlier Xid, which carries the fault itself.

SXid lines come from NVSwitch (``nvidia-nvswitchN: SXid (PCI:...): code, ...``): all are classed as
fabric (``nvlink``) faults; their codes are a separate number space and are kept in ``xid``.
"""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from pipeline.categories import FailureCategory as C


class XidInfo(NamedTuple):
    description: str
    category: C
    action: str
    interrupting: bool | None = None  # None: as the category says


XID_CATALOG: dict[int, XidInfo] = {
    8: XidInfo("GPU stopped processing (channel idle timeout)", C.SOFTWARE, "RESTART_APP"),
    13: XidInfo("Graphics engine exception", C.APPLICATION, "RESTART_APP"),
    31: XidInfo("GPU memory page fault (MMU)", C.APPLICATION, "RESTART_APP"),
    32: XidInfo("Invalid or corrupted push buffer stream", C.SOFTWARE, "RESTART_APP"),
    38: XidInfo("Driver firmware error", C.GPU_FIRMWARE, "RESET_GPU"),
    43: XidInfo("GPU stopped processing (reset channel verification error)", C.APPLICATION, "RESTART_APP"),
    45: XidInfo("Preemptive cleanup, due to previous errors", C.APPLICATION, "RESTART_APP"),
    46: XidInfo("GPU stopped processing", C.GPU_FIRMWARE, "RESET_GPU"),
    48: XidInfo("Double-bit ECC error (DBE)", C.GPU_MEMORY, "RESET_GPU"),
    61: XidInfo("Internal micro-controller breakpoint/warning", C.GPU_FIRMWARE, "RESET_GPU"),
    62: XidInfo("Internal micro-controller halt", C.GPU_FIRMWARE, "RESET_GPU"),
    63: XidInfo(
        "ECC page retirement or row remapping recorded (reset to apply)", C.GPU_MEMORY_WARNING, "RESET_GPU"
    ),
    64: XidInfo("ECC page retirement or row remapper recording failure", C.GPU_MEMORY, "RESET_GPU"),
    69: XidInfo("Graphics engine class error", C.APPLICATION, "RESTART_APP"),
    74: XidInfo("NVLink error", C.NVLINK, "RESET_GPU"),
    79: XidInfo("GPU has fallen off the bus", C.GPU_FELL_OFF_BUS, "RESTART_BM"),
    92: XidInfo("High single-bit ECC error rate", C.GPU_MEMORY_WARNING, "IGNORE"),
    94: XidInfo("Contained ECC error", C.GPU_MEMORY, "RESTART_APP"),
    95: XidInfo("Uncontained ECC error", C.GPU_MEMORY, "RESET_GPU"),
    109: XidInfo("Context switch timeout", C.SOFTWARE, "RESTART_APP"),
    119: XidInfo("GSP RPC timeout", C.GPU_FIRMWARE, "RESET_GPU"),
    120: XidInfo("GSP error", C.GPU_FIRMWARE, "RESET_GPU"),
    121: XidInfo("C2C link error", C.NVLINK, "RESET_GPU"),
    140: XidInfo("Unrecovered ECC error", C.GPU_MEMORY, "RESET_GPU"),
    143: XidInfo("GPU initialization failure", C.GPU_FIRMWARE, "RESET_GPU"),
    154: XidInfo("GPU recovery action changed (restates an earlier Xid)", C.OTHER, "SEE_LINKED_XID", False),
}

SXID_CATEGORY = C.NVLINK
SXID_ACTION = "CHECK_FABRIC"
UNKNOWN_ACTION = "CONTACT_SUPPORT"


def interrupting(info: XidInfo) -> bool:
    return info.category.interrupting if info.interrupting is None else info.interrupting


def catalog_frame() -> pl.DataFrame:
    """The catalog as a frame (xid, description, category, interrupting, action) for joins."""
    return pl.DataFrame(
        [
            (code, info.description, info.category.value, interrupting(info), info.action)
            for code, info in XID_CATALOG.items()
        ],
        schema={
            "xid": pl.Int32,
            "description": pl.String,
            "category": pl.String,
            "interrupting": pl.Boolean,
            "action": pl.String,
        },
        orient="row",
    )
