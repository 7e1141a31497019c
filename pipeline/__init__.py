"""failcast: reliability analytics for GPU training clusters.

Data flows one way: ingest -> warehouse -> transform -> models -> projection -> report.
"""

__version__ = "0.1.0"
