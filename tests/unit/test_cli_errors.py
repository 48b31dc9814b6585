"""API server answers -> the one line a user reads and the exit code (docs/cli.md), table-driven."""

from __future__ import annotations

import json

import pytest

from dpjob_cli.errors import ExitCode
from dpjob_cli.kube_errors import Target, translate_api_error

pytestmark = pytest.mark.unit
JOB = Target(kind="DataParallelJob", name="train", namespace="team-a", server="https://10.0.0.1:6443",
             kubeconfig="/home/me/.kube/config")


def status(code: int, message: str, **details: object) -> str:
    return json.dumps({"kind": "Status", "code": code, "message": message, "details": details})


CEL = 'Invalid value: "object": spec.backend nccl needs spec.accelerator gpu and hccl needs npu; gloo works everywhere'


@pytest.mark.parametrize("code, body, exit_code, line", [
    (404, "404 page not found", ExitCode.CRD_MISSING,
     "the DataParallelJob CRD (dataparalleljobs.dpjob.io) is not installed on https://10.0.0.1:6443: install it "
     "with `helm install dpjob oci://ghcr.io/dpjob/charts/dpjob-operator -n dpjob-system --create-namespace` "
     "(docs/install.md; or `kubectl apply --server-side -f crds/`)"),
    (404, status(404, "not found", name="train", kind="dataparalleljobs"), ExitCode.NOT_FOUND,
     "no DataParallelJob 'train' in namespace team-a (`dpjob list` shows the jobs there; -n selects another "
     "namespace)"),
    (404, status(404, 'namespaces "team-a" not found', name="team-a", kind="namespaces"), ExitCode.NOT_FOUND,
     "namespace team-a does not exist"),
    (422, status(422, "invalid", causes=[{"field": "spec", "message": CEL}]), ExitCode.INVALID_SPEC,
     "invalid spec: spec: spec.backend nccl needs spec.accelerator gpu and hccl needs npu; gloo works everywhere"),
    (400, status(400, '.spec.replicaz: field not declared in schema'), ExitCode.INVALID_SPEC,
     "invalid spec: .spec.replicaz: field not declared in schema"),
    (401, status(401, "Unauthorized"), ExitCode.NO_CLUSTER,
     "no cluster access: https://10.0.0.1:6443 rejected the credentials of kubeconfig /home/me/.kube/config "
     "(401 Unauthorized)"),
    (403, status(403, 'dataparalleljobs.dpjob.io is forbidden: User "me" cannot create'), ExitCode.API_ERROR,
     'forbidden: dataparalleljobs.dpjob.io is forbidden: User "me" cannot create'),
    (409, status(409, "exists"), ExitCode.API_ERROR,
     "DataParallelJob train in namespace team-a already exists (pick another --name, or `dpjob delete train`)"),
    (500, "etcd timeout", ExitCode.API_ERROR,
     "API server error 500 on DataParallelJob train in namespace team-a: etcd timeout"),
])
def test_every_refusal_is_one_line_with_its_exit_code(code, body, exit_code, line):
    err = translate_api_error(code, body, JOB)
    assert (err.code, err.message) == (exit_code, line)


def test_several_invalid_fields_give_one_line_each():
    causes = [{"field": "spec.replicas", "message": "Invalid value: 0: spec.replicas in body should be >= 1"},
              {"field": "spec.accelerator", "message": 'Unsupported value: "tpu"'}]
    err = translate_api_error(422, status(422, "invalid", causes=causes), JOB)
    assert err.lines() == ["invalid spec: spec.replicas: Invalid value: 0: spec.replicas in body should be >= 1",
                           'invalid spec: spec.accelerator: Unsupported value: "tpu"']
