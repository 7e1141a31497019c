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
otherwise: application-caused codes (13, 31, 43, 45, 68, 69 — NVIDIA's Kubernetes device plugin
ignores 13, 31, 43, 45, 68 and 109 as application errors) and codes the catalog buckets as IGNORE
(38, 44, 63 row remap pending, 92 high single-bit ECC rate, 121 corrected C2C, 147/148) do not take
a node out; 154 only restates the recovery wanted for an earlier Xid, which carries the fault.
109 (context switch timeout) stays an interrupting software fault: the catalog's immediate action
is RESET_GPU, although the device plugin treats it as application-caused. Actions named
``WORKFLOW_*`` are the catalog's: follow the workflow for that code (e.g. 48: reset, drain if 63/64
follow). Checked against copies of the catalog spreadsheet (NVIDIA/NVSentinel's XID CSV) in 2026-12;
rows beyond 8 of the catalog page itself could not be read here.

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
    38: XidInfo("Driver firmware watchdog timeout", C.GPU_FIRMWARE, "IGNORE", False),
    43: XidInfo("GPU stopped processing (reset channel verification error)", C.APPLICATION, "IGNORE"),
    44: XidInfo("Graphics engine fault during context switch", C.SOFTWARE, "IGNORE", False),
    45: XidInfo("Preemptive cleanup, due to previous errors", C.APPLICATION, "WORKFLOW_XID_45"),
    46: XidInfo("GPU stopped processing", C.GPU_FIRMWARE, "RESET_GPU"),
    48: XidInfo("Double-bit ECC error (DBE)", C.GPU_MEMORY, "WORKFLOW_XID_48"),
    61: XidInfo(
        "Internal micro-controller breakpoint/warning (unused on A100+)", C.GPU_FIRMWARE, "CONTACT_SUPPORT"
    ),
    62: XidInfo("Internal micro-controller halt", C.GPU_FIRMWARE, "RESET_GPU"),
    63: XidInfo(
        "ECC page retirement or row remapping recorded (applied at next reset)",
        C.GPU_MEMORY_WARNING,
        "IGNORE",
    ),
    64: XidInfo("ECC page retirement or row remapper recording failure", C.GPU_MEMORY, "RESET_GPU"),
    68: XidInfo("NVDEC0 exception (video decoder)", C.APPLICATION, "RESTART_APP"),
    69: XidInfo("Graphics engine class error", C.APPLICATION, "RESTART_APP"),
    74: XidInfo("NVLink error", C.NVLINK, "WORKFLOW_NVLINK_ERR"),
    79: XidInfo("GPU has fallen off the bus", C.GPU_FELL_OFF_BUS, "RESTART_BM"),
    92: XidInfo("High single-bit ECC error rate", C.GPU_MEMORY_WARNING, "IGNORE"),
    94: XidInfo("Contained ECC error", C.GPU_MEMORY, "RESTART_APP"),
    95: XidInfo("Uncontained ECC error", C.GPU_MEMORY, "RESET_GPU"),
    109: XidInfo("Context switch timeout", C.SOFTWARE, "RESET_GPU"),
    110: XidInfo("Security fault error", C.GPU_FIRMWARE, "RESET_GPU"),
    119: XidInfo("GSP RPC timeout", C.GPU_FIRMWARE, "RESET_GPU"),
    120: XidInfo("GSP error", C.GPU_FIRMWARE, "RESET_GPU"),
    121: XidInfo("C2C link error (corrected)", C.NVLINK, "IGNORE", False),
    136: XidInfo("NVLink link training failure", C.NVLINK, "RESET_GPU"),
    140: XidInfo("Unrecovered ECC error", C.GPU_MEMORY, "RESET_GPU"),
    143: XidInfo("GPU initialization failure", C.GPU_FIRMWARE, "RESET_GPU"),
    **{
        code: XidInfo("NVLink5 error (decode the sub-code)", C.NVLINK, "WORKFLOW_NVLINK5_ERR")
        for code in (144, 145, 146, 149, 150)
    },
    147: XidInfo("NVLink5 error (informational)", C.NVLINK, "IGNORE", False),
    148: XidInfo("NVLink5 error (informational)", C.NVLINK, "IGNORE", False),
    154: XidInfo("GPU recovery action changed (restates an earlier Xid)", C.OTHER, "XID_154", False),
    155: XidInfo("NVLink link down", C.NVLINK, "RESET_GPU"),
}

XID_LINE = (
    r"(?P<sxid>S?)Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\):"
    r"\s*(?P<code>\d+)"
)
"""The driver's Xid (or NVSwitch SXid) text: PCI id (``PCI:`` prefix optional, as on old drivers) and code.
One pattern for Polars and Python's ``re`` (named groups ``sxid``, ``pci``, ``code``): kernel logs and
the Xid lines other tools quote (HyperPod's health agent) are parsed alike."""

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
