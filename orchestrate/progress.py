"""The workers' import for reporting training steps: ``from orchestrate.progress import report``.

It is the node package's progress channel (:mod:`orchestrate.node.progress`), under the name
the documentation gives; see there.
"""
from orchestrate.node.progress import report, report_resumed

__all__ = ["report", "report_resumed"]
