"""Published reference figures: the GPU fleets' interruption counts (OPT-175B, MPT-7B, Llama 3.1)
and the baselines table that sets a fleet's own rates beside them (:mod:`.baselines`). The public
data sets' readers (LANL, Titan, BGL) are readers like any other: :mod:`pipeline.readers`."""

from pipeline.datasets.baselines import PUBLISHED_GPU_FLEETS, PublishedFleet, public_baselines

__all__ = ["PUBLISHED_GPU_FLEETS", "PublishedFleet", "public_baselines"]
