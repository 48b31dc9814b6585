"""The I/O side of the operator: a work queue of jobs and the passes that reconcile them.

``reconciler.Controller`` joins the pieces, one concern per module: ``workqueue`` (keys, timers,
backoff), ``observer`` (what a pass sees), ``executor`` (plan actions -> API calls), ``gangs``
(Workload and PodGroups), ``kueue`` and ``kueue_watch`` (Kueue's Workloads), ``blocking`` (the
client's blocking calls off the loop) and ``timings`` (job-level metrics). The decisions themselves
are pure, in ``reconcile/``.
"""

from dpjob_operator.controller.reconciler import Controller

__all__ = ["Controller"]
