"""The test kit: what unit, integration and e2e tests share, each fact in one module.

``builders`` makes DataParallelJobs and pod observations; ``cluster`` talks to the real API
server; ``waits`` polls with a message naming what it waited for; ``ports`` finds a free port;
``operator`` runs the operator as a process; ``helm`` drives the chart; ``paths`` knows where the
repository, the dev cluster and the examples are. Fixtures stay in ``tests/conftest.py``.
"""
