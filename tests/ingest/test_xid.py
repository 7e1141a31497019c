"""XID rows checked against NVIDIA's Xid catalog (immediate-action bucket) and device plugin.

Codes above 119 row by row as the catalog lists them (docs/ingest.md, "Codes", for the sources):
the immediate action, and the class failcast reads them as."""

from __future__ import annotations

import pytest

from pipeline.xid import XID_CATALOG, catalog_frame, interrupting


@pytest.mark.parametrize(
    ("code", "category", "action", "interrupts"),
    [
        (13, "application", "RESTART_APP", False),
        (38, "gpu_firmware", "IGNORE", False),
        (43, "application", "IGNORE", False),
        (48, "gpu_memory", "WORKFLOW_XID_48", True),
        (63, "gpu_memory_warning", "IGNORE", False),
        (68, "application", "RESTART_APP", False),
        (74, "nvlink", "WORKFLOW_NVLINK_ERR", True),
        (79, "gpu_fell_off_bus", "RESTART_BM", True),
        (92, "gpu_memory_warning", "IGNORE", False),
        (95, "gpu_memory", "RESET_GPU", True),
        (109, "software", "RESET_GPU", True),
        (120, "gpu_firmware", "RESET_GPU", True),
        (121, "nvlink", "IGNORE", False),
        *((code, "software", "RESTART_APP", True) for code in range(126, 136)),  # CE10-CE19
        (136, "nvlink", "RESET_GPU", True),
        (137, "application", "IGNORE", False),
        (139, "software", "RESTART_APP", True),
        (140, "gpu_memory", "RESET_GPU", True),
        (141, "software", "IGNORE", False),
        (142, "software", "CONTACT_SUPPORT", True),
        (143, "gpu_firmware", "RESET_GPU", True),
        *((code, "nvlink", "WORKFLOW_NVLINK5_ERR", True) for code in range(144, 151)),
        (151, "software", "RESTART_VM", True),
        (152, "software", "IGNORE", False),
        (153, "software", "IGNORE", False),
        (154, "other", "XID_154", False),  # by its recovery action: test_kernel_log_nvrm.py
        (155, "nvlink", "RESET_GPU", True),
        (156, "gpu_memory", "RESET_GPU", True),
        (157, "gpu_memory_warning", "IGNORE", False),
        (158, "gpu_hardware", "RESET_GPU", True),
        (159, "software", "CHECK_UVM", True),
        (160, "software", "IGNORE", False),
        (161, "software", "IGNORE", False),
        *((code, "gpu_hardware", "", False) for code in range(162, 166)),  # power smoothing: no bucket
        (166, "nvlink", "", True),
        (167, "gpu_hardware", "", True),
        (168, "gpu_memory_warning", "", False),
        (169, "gpu_firmware", "", True),
        (170, "nvlink", "", True),
        (171, "gpu_memory", "", True),  # beside an Xid 48: the same class, one incident
        (172, "gpu_memory", "", True),
    ],
)
def test_catalog_rows(code: int, category: str, action: str, interrupts: bool) -> None:
    info = XID_CATALOG[code]
    assert (info.category.value, info.action, interrupting(info)) == (category, action, interrupts)


def test_catalog_frame_has_one_row_per_code() -> None:
    frame = catalog_frame()
    assert frame.height == len(XID_CATALOG) and frame["xid"].is_unique().all()


@pytest.mark.parametrize("code", [122, 123, 124, 125, 138])
def test_codes_the_catalog_marks_unused_have_no_row(code: int) -> None:
    """Unused codes stay unknown_xid (the catalog's CONTACT_SUPPORT), counted in a note."""
    assert code not in XID_CATALOG


def test_every_code_above_119_up_to_172_is_in_the_catalog_or_unused() -> None:
    assert set(range(120, 173)) - set(XID_CATALOG) == {122, 123, 124, 125, 138}
