"""NVIDIA XID catalog and the driver's (NVRM) messages: code -> failcast category, whether it
interrupts training, recommended action; the text of Xid, SXid and fallen-off-the-bus lines.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer;
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose "Resolution Bucket
(Immediate Action)" column gives the action names used here (IGNORE, RESTART_APP, RESET_GPU,
RESTART_BM = reboot the bare-metal node, RESTART_VM, CONTACT_SUPPORT, ...); NVIDIA's dynamic page
retirement notes (48 DBE, 63 page retired / row remapped, 64 retirement failed); NVIDIA Health
Validation Xid checks (46, 48 critical -> drain and reset). Codes 120-172 were checked row by row
against the catalog (2026-12: a stored copy of the page, and leptonai/gpud's
``components/accelerator/nvidia/xid/catalog_generated.go``, generated from NVIDIA's spreadsheet);
docs/ingest.md lists the sources. Codes the catalog marks "Unused" (122-125, 138) get no row: only
codes listed here get a category, every other code is kept as ``unknown_xid`` (CONTACT_SUPPORT,
as the catalog says for unused codes) and counted, never dropped. Re-check when a new GPU
generation or driver branch lands.

``interrupting`` follows the category (``FailureCategory.interrupting``) except where a code says
otherwise: application-caused codes (13, 31, 43, 45, 68, 69, 137 — NVIDIA's Kubernetes device
plugin ignores 13, 31, 43, 45, 68 and 109 as application errors) and codes the catalog buckets as
IGNORE (38, 44, 63 row remap pending, 92 high single-bit ECC rate, 121 corrected C2C, 141, 152, 153,
157, 160, 161) do not take a node out. 109 (context switch timeout) stays an interrupting software
fault: the catalog's immediate action is RESET_GPU, although the device plugin treats it as
application-caused. Actions named ``WORKFLOW_*`` are the catalog's: follow the workflow for that
code (e.g. 48: reset, drain if 63/64 follow). Codes 162-172 have no bucket in the catalog (action
``""``); their rows follow the catalog's trigger text (162-165 power smoothing: informational; 171
and 172 accompany an Xid 48 and share its class, so they fall in its incident).

Xid 154 ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)") states the
recovery an earlier Xid needs; its class comes from that action, not from the code
(:func:`driver_messages`): ``None`` is no recovery (class other, not interrupting); any other
action (reset, reboot, drain, FLR ...) is a GPU that cannot run work until it is recovered
(``gpu_hardware``, interrupting). The catalog's expected values are "None", "Drain P2P", "Drain and
Reset", "GPU Reset Required", "Node Reboot Required"; newer drivers also print "OS Reboot" and "PF
FLR".

SXid lines come from NVSwitch (``nvidia-nvswitchN: SXid (PCI:...): code, ...``): all are classed as
fabric (``nvlink``) faults; their codes are a separate number space and are kept in ``xid``.

A GPU that fell off the bus is also printed without an Xid (:data:`FELL_PCI`, :func:`message_kind`):
``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` (older drivers), ``NVRM: GPU 0000:01:00.0:
GPU has fallen off the bus.`` (beside an Xid 79 on current drivers) and, when the GPU is already
lost at probe time, one message over three lines: ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM:
(PCI ID: 10de:26b5) installed in this system has`` / ``NVRM: fallen off the bus and is not
responding to commands.`` (the last two may be one line). All are class ``gpu_fell_off_bus``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
    **{
        code: XidInfo(f"Copy engine CE{code - 116} error", C.SOFTWARE, "RESTART_APP")
        for code in range(126, 136)
    },
    136: XidInfo("NVLink link training failure", C.NVLINK, "RESET_GPU"),
    137: XidInfo(
        "NVLink privilege error (illegal peer access, usually the application)", C.APPLICATION, "IGNORE"
    ),
    139: XidInfo("OFA1 (optical flow) error", C.SOFTWARE, "RESTART_APP"),
    140: XidInfo("Unrecovered ECC error", C.GPU_MEMORY, "RESET_GPU"),
    141: XidInfo("CUDA fast path error", C.SOFTWARE, "IGNORE", False),
    142: XidInfo("NVENC3 error (video encoder)", C.SOFTWARE, "CONTACT_SUPPORT"),
    143: XidInfo("GPU initialization failure", C.GPU_FIRMWARE, "RESET_GPU"),
    **{
        code: XidInfo(f"NVLink5 {unit} error (decode the sub-code)", C.NVLINK, "WORKFLOW_NVLINK5_ERR")
        for code, unit in (
            (144, "SAW"),
            (145, "RLW"),
            (146, "TLW"),
            (147, "TREX"),
            (148, "NVLPW_CTRL"),
            (149, "NETIR"),
            (150, "MSE"),
        )
    },
    151: XidInfo("Key rotation error (confidential computing)", C.SOFTWARE, "RESTART_VM"),
    152: XidInfo("DLA SMMU error", C.SOFTWARE, "IGNORE", False),
    153: XidInfo("DLA timeout", C.SOFTWARE, "IGNORE", False),
    154: XidInfo("GPU recovery action changed (restates an earlier Xid)", C.OTHER, "XID_154", False),
    155: XidInfo("NVLink SW-defined error (link down flagged intentional)", C.NVLINK, "RESET_GPU"),
    156: XidInfo("Resource retirement event", C.GPU_MEMORY, "RESET_GPU"),
    157: XidInfo("Resource retirement failure", C.GPU_MEMORY_WARNING, "IGNORE"),
    158: XidInfo("GPU fatal timeout", C.GPU_HARDWARE, "RESET_GPU"),
    159: XidInfo("CHI non-data error (C2C)", C.SOFTWARE, "CHECK_UVM"),
    160: XidInfo("Channel retirement event", C.SOFTWARE, "IGNORE", False),
    161: XidInfo("Channel retirement failure", C.SOFTWARE, "IGNORE", False),
    **{
        code: XidInfo(f"Power smoothing circuitry {what}", C.GPU_HARDWARE, "", False)
        for code, what in (
            (162, "re-engaged"),
            (163, "disengaged"),
            (164, "low lifetime reached"),
            (165, "lifetime exhausted"),
        )
    },
    166: XidInfo("NVLink encrypted traffic before the link was configured (CC mode)", C.NVLINK, ""),
    167: XidInfo("PCIe fatal timeout", C.GPU_HARDWARE, ""),
    168: XidInfo("Reduced GPU memory capacity (errors in WPR, ECC off)", C.GPU_MEMORY_WARNING, ""),
    169: XidInfo("SEC2 micro-controller halt", C.GPU_FIRMWARE, ""),
    170: XidInfo("NVLink interrupt in CC mode", C.NVLINK, ""),
    171: XidInfo("Uncorrectable DRAM error (with Xid 48)", C.GPU_MEMORY, ""),
    172: XidInfo("Uncorrectable SRAM error (with Xid 48)", C.GPU_MEMORY, ""),
}

XID_LINE = (
    r"(?P<sxid>S?)Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\):"
    r"\s*(?P<code>\d+)"
)
"""The driver's Xid (or NVSwitch SXid) text: PCI id (``PCI:`` prefix optional, as on old drivers) and code.
One pattern for Polars and Python's ``re`` (named groups ``sxid``, ``pci``, ``code``): kernel logs and
the Xid lines other tools quote (HyperPod's health agent) are parsed alike."""

KERNEL_XID = re.compile(r"Xid \((?:PCI:)?[0-9A-Fa-f]{4}:")
"""The start of the kernel's own Xid line (its PCI id), as opposed to a mention of an Xid in a text
(a drain reason "Xid 79"): a file holding one is a kernel log (format sniffing)."""

FELL_OFF = "fallen off the bus"
FELL_PCI = (
    r"NVRM: (?:The NVIDIA GPU|GPU at|GPU) (?:PCI:)?(?P<fpci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
    r"(?:\.[0-9A-Fa-f])?\b"
)
"""The GPU a fallen-off-the-bus message names, in each of the driver's forms (group ``fpci``)."""
HEAD_WORDS = "NVRM: The NVIDIA GPU "
"""The first line of a message that continues on the next lines (fallen off the bus, or not supported)."""
MIDDLE = "installed in this system has"
RECOVERY_ACTION = (
    r"recovery action changed from 0x[0-9A-Fa-f]+(?: \([^)]*\))? to 0x(?P<rcode>[0-9A-Fa-f]+)"
    r"(?: \((?P<raction>[^)]*)\))?"
)
"""Xid 154's text: the new action's code and its name."""

SXID_CATEGORY = C.NVLINK
SXID_ACTION = "CHECK_FABRIC"
UNKNOWN_ACTION = "CONTACT_SUPPORT"
RECOVERY_CATEGORY = C.GPU_HARDWARE
"""The class of an Xid 154 whose action is not None: a GPU that needs recovery, its mode named by
the Xid before it."""


def interrupting(info: XidInfo) -> bool:
    return info.category.interrupting if info.interrupting is None else info.interrupting


def message_kind(message: pl.Expr) -> pl.Expr:
    """What an NVRM line is, by its words alone (literal searches: cheap on every candidate line):
    ``xid`` (any line naming Xid, SXid included: it is read, or rejected, as an Xid line),
    ``fallen`` (a fallen-off-the-bus line: ``fell`` or ``tail`` once :func:`driver_messages` knows
    whether it names its GPU), ``head`` (``NVRM: The NVIDIA GPU``, the first line of a multi-line
    message), ``middle`` (``... installed in this system has``), or null: an NVRM line that
    carries nothing."""
    return (
        pl.when(message.str.contains("Xid", literal=True))
        .then(pl.lit("xid"))
        .when(message.str.contains(FELL_OFF, literal=True))
        .then(pl.lit("fallen"))
        .when(message.str.contains(HEAD_WORDS, literal=True))
        .then(pl.lit("head"))
        .when(message.str.contains(MIDDLE, literal=True))
        .then(pl.lit("middle"))
    )


def driver_messages(
    frame: pl.DataFrame, text: str, bus_order: Mapping[str, int], keep: pl.Expr | None = None
) -> pl.DataFrame:
    """``frame`` with the driver's fields of its column ``text`` (a kernel message, or a whole log
    line holding one): ``kind`` (:func:`message_kind`; a fallen-off line is ``fell`` when it names
    its GPU, else ``tail``, the last line of a message whose GPU is on its first line), ``xid``,
    ``pci_bus_id`` (``0000:18:00``: lower case, without the PCI function, as Xid lines print it, so
    a fallen-off line and the Xid 79 beside it name one GPU), ``is_sxid``, ``gpu_index`` (the PCI
    bus's place in ``bus_order``), and Xid 154's ``recovery_action`` with ``recovery_interrupts``:
    every action but None (code 0) takes the GPU out of service; null when the line names no
    action. Rows whose text carries nothing (``kind`` null) are dropped first, unless ``keep``
    holds for them, so the patterns run on the driver's lines only."""
    message = pl.col(text)
    frame = frame.with_columns(message_kind(message).alias("kind")).filter(
        pl.col("kind").is_not_null() | (pl.lit(False) if keep is None else keep)
    )
    xid_line = message.str.extract_groups(XID_LINE)
    named = pl.col("kind").is_in(["fallen", "head"])
    pci = pl.coalesce(xid_line.struct.field("pci"), pl.when(named).then(message.str.extract(FELL_PCI, 1)))
    frame = frame.with_columns(
        xid_line.struct.field("code").cast(pl.Int32, strict=False).alias("xid"),
        pci.str.to_lowercase().alias("pci_bus_id"),
        (xid_line.struct.field("sxid") == "S").fill_null(False).alias("is_sxid"),
        pl.lit(None, pl.String).alias("recovery_action"),
        pl.lit(None, pl.Boolean).alias("recovery_interrupts"),
    ).with_columns(
        pl.when(pl.col("kind") != "fallen")
        .then(pl.col("kind"))
        .when(pl.col("pci_bus_id").is_not_null())
        .then(pl.lit("fell"))
        .otherwise(pl.lit("tail"))
        .alias("kind"),
        pl.col("pci_bus_id")
        .str.slice(5, 2)
        .replace_strict(dict(bus_order), default=None, return_dtype=pl.Int32)
        .alias("gpu_index"),
    )
    if (frame["xid"] == 154).any():  # the recovery pattern runs only when a 154 is there
        recovery = message.str.extract_groups(RECOVERY_ACTION)
        action = recovery.struct.field("raction").str.strip_chars()
        code = recovery.struct.field("rcode")
        frame = frame.with_columns(
            pl.when(action != "").then(action).alias("recovery_action"),
            pl.when(action != "")
            .then(action.str.to_lowercase() != "none")
            .when(code.is_not_null())
            .then(code.str.strip_chars_start("0") != "")
            .alias("recovery_interrupts"),
        )
    return frame


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
