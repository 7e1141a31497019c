"""Readers for public failure data sets (LANL 1996-2005, OLCF Titan GPUs, Loghub BGL) and the
public baselines table. See docs/public-data.md for the mapping choices and published numbers."""

from pipeline.datasets.baselines import PUBLISHED_GPU_FLEETS, PublishedFleet, public_baselines
from pipeline.datasets.frames import CanonicalFrames, merge_intervals, shared_datasets_dir
from pipeline.datasets.lanl import read_lanl
from pipeline.datasets.loghub import BGL_ALERT_CATEGORIES, read_bgl
from pipeline.datasets.titan import cumulative_incidence, read_service_locations, read_titan

__all__ = [
    "BGL_ALERT_CATEGORIES",
    "PUBLISHED_GPU_FLEETS",
    "CanonicalFrames",
    "PublishedFleet",
    "cumulative_incidence",
    "merge_intervals",
    "public_baselines",
    "read_bgl",
    "read_lanl",
    "read_service_locations",
    "read_titan",
    "shared_datasets_dir",
]
