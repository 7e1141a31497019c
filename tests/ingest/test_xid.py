"""XID rows checked against NVIDIA's Xid catalog (immediate-action bucket) and device plugin."""

from __future__ import annotations

import pytest

from pipeline.ingest.xid import XID_CATALOG, catalog_frame, interrupting


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
        (121, "nvlink", "IGNORE", False),
        (147, "nvlink", "IGNORE", False),
        (154, "other", "XID_154", False),
    ],
)
def test_catalog_rows(code: int, category: str, action: str, interrupts: bool) -> None:
    info = XID_CATALOG[code]
    assert (info.category.value, info.action, interrupting(info)) == (category, action, interrupts)


def test_catalog_frame_has_one_row_per_code() -> None:
    frame = catalog_frame()
    assert frame.height == len(XID_CATALOG) and frame["xid"].is_unique().all()
