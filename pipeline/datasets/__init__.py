"""Readers for public failure data sets (LANL 1996-2005, OLCF Titan GPUs, Loghub BGL) and the
public baselines table. See docs/public-data.md for the mapping choices and published numbers."""

from pipeline.datasets.frames import CanonicalFrames, shared_datasets_dir
from pipeline.datasets.lanl import read_lanl
from pipeline.datasets.titan import cumulative_incidence, read_titan

__all__ = ["CanonicalFrames", "cumulative_incidence", "read_lanl", "read_titan", "shared_datasets_dir"]
