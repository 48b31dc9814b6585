"""dpjob's command line, kubectl plugin and Python SDK.

``dpjob run train.py`` packs a script into a ConfigMap owned by a new DataParallelJob and follows
every rank to the job's result; ``dpjob explain`` shows what the operator would create; ``logs``,
``status``, ``list``, ``delete`` and ``wait`` work on running jobs. ``Client`` offers the same
verbs to Python (notebooks). Only ``kube`` talks to the Kubernetes API.
"""

from dpjob_cli.errors import CliError, ExitCode, JobFailedError, WaitTimeoutError
from dpjob_cli.log_options import LogOptions
from dpjob_cli.sdk import Client, JobHandle

__all__ = ["CliError", "Client", "ExitCode", "JobFailedError", "JobHandle", "LogOptions", "WaitTimeoutError"]
