"""PromQL building blocks of the dashboards: the selectors that scope each side's series and the
query shapes the panels repeat.

- Trainer series are filtered with ``namespace=~"$namespace", dpjob_job=~"$job"``: the chart's
  PodMonitor relabels the pod label ``dpjob.io/job-name`` to ``dpjob_job`` (Prometheus' own ``job``
  label is the scrape job).
- Operator series are filtered with ``job=~"$operator"`` because controller-runtime names
  (``rest_client_requests_total``, ``workqueue_depth``...) are exported by every Go controller a
  cluster-wide Prometheus scrapes.
- Every ``rate()`` and ``increase()`` spans ``$__rate_interval``.
- Label-carrying counters that only appear after their first increment (errors, restarts,
  deletions) end in ``OR_ZERO`` so an idle operator shows 0, not "No data".
"""

from __future__ import annotations

TRAINER_SELECTOR = 'namespace=~"$namespace", dpjob_job=~"$job"'
OPERATOR_SELECTOR = 'job=~"$operator"'
# The reconcile metrics of controller-runtime, narrowed to the DataParallelJob controller.
CONTROLLER_SELECTOR = f'{OPERATOR_SELECTOR}, controller="dataparalleljob"'
RATE_INTERVAL = "$__rate_interval"
OR_ZERO = " or on() vector(0)"
# Attach the trainer's global rank (a label of dpjob_trainer_info) to a per-target series.
WITH_RANK_LABEL = f"* on(job, instance) group_left(rank) dpjob_trainer_info{{{TRAINER_SELECTOR}}}"
# Legends of the per-job and per-rank series.
PER_JOB_LEGEND = "{{namespace}}/{{dpjob_job}}"
PER_RANK_LEGEND = "rank {{rank}}"


def trainer(metric: str, *matchers: str) -> str:
    """A trainer series of the selected jobs, with any further label matchers."""
    return f"{metric}{{{', '.join((TRAINER_SELECTOR, *matchers))}}}"


def operator(metric: str, *matchers: str, selector: str = OPERATOR_SELECTOR) -> str:
    """A series of the selected operator scrape job, with any further label matchers."""
    return f"{metric}{{{', '.join((selector, *matchers))}}}"


def rate(series: str) -> str:
    return f"rate({series}[{RATE_INTERVAL}])"


def increase(series: str) -> str:
    return f"increase({series}[{RATE_INTERVAL}])"


def quantile(q: float, buckets: str, by: str = "le") -> str:
    """The ``q`` quantile of a histogram's ``_bucket`` series, summed over everything but ``by``."""
    return f"histogram_quantile({q}, sum by ({by}) ({rate(buckets)}))"


def per_rank(expr: str) -> str:
    """``expr`` (one series per trainer target) labelled with each target's rank."""
    return f"{expr} {WITH_RANK_LABEL}"
