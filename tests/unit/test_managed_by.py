"""spec.managedBy: which jobs an operator runs, and the names an operator and a job may carry."""

from __future__ import annotations

import pytest

from dpjob_operator.api import managed_by as mb
from dpjob_operator.config import load_config
from tests.support.crd import crd_schema

pytestmark = pytest.mark.unit

OTHER = "example.com/canary"


@pytest.mark.parametrize("spec, operator_name, runs", [
    ({}, mb.DEFAULT_CONTROLLER, True),                                  # unset names the default operator
    ({"managedBy": mb.DEFAULT_CONTROLLER}, mb.DEFAULT_CONTROLLER, True),
    ({"managedBy": "kueue.x-k8s.io/multikueue"}, mb.DEFAULT_CONTROLLER, False),  # MultiKueue's manager copy
    ({}, OTHER, False),                                                # a second install runs only its own
    ({"managedBy": OTHER}, OTHER, True),
    ({"managedBy": ""}, mb.DEFAULT_CONTROLLER, True),                   # empty is unset (the CRD rejects it)
])
def test_an_operator_runs_the_jobs_that_name_it(spec, operator_name, runs):
    assert mb.runs_here({"spec": spec}, operator_name) is runs


@pytest.mark.parametrize("name, valid", [
    ("dpjob.io/operator", True), ("kueue.x-k8s.io/multikueue", True), ("example.com/a_b.c", True),
    ("operator", False), ("Example.com/x", False), ("example.com/", False), ("/x", False),
    ("example.com/" + "x" * 52, False),  # 64 characters
])
def test_controller_names_are_domain_prefixed_and_short(name, valid):
    assert mb.valid_controller_name(name) is valid


def test_the_crd_accepts_exactly_the_names_an_operator_may_take():
    field = crd_schema()["properties"]["spec"]["properties"]["managedBy"]
    assert field["pattern"] == mb.PATTERN and field["maxLength"] == mb.MAX_LENGTH


def test_the_operator_takes_its_name_from_the_environment_and_refuses_a_bad_one():
    assert load_config(environ={}).controller_name == mb.DEFAULT_CONTROLLER
    assert load_config(environ={"DPJOB_CONTROLLER_NAME": OTHER}).controller_name == OTHER
    with pytest.raises(ValueError, match="controllerName must be a domain-prefixed name"):
        load_config(environ={"DPJOB_CONTROLLER_NAME": "canary"})
