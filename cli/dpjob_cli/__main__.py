"""``python -m dpjob_cli``: the same CLI as ``dpjob``."""

from dpjob_cli.main import entry

entry()
