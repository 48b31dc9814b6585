"""Every API connection of the operator has TCP keepalive and every call a deadline (issue: a
half-open connection must not wedge a worker or blind the pod watch forever)."""

from __future__ import annotations

import socket

import pytest
from kubernetes import client

from dpjob_operator.k8s.client import REQUEST_TIMEOUT
from dpjob_operator.k8s.connection import tuned

pytestmark = pytest.mark.unit


def test_connections_keep_alive_like_client_go():
    api = client.ApiClient(tuned(client.Configuration(), pool_size=16))
    options = api.rest_client.pool_manager.connection_pool_kw["socket_options"]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30) in options
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 16


def test_every_call_has_a_connect_and_read_deadline():
    connect, read = REQUEST_TIMEOUT
    assert 0 < connect <= 10 and 0 < read <= 60
