"""``dpjob run --queue NAME --priority CLASS``: the job carries Kueue's labels, so Kueue queues it (and
the operator waits for the admission); a name Kueue could not read is a usage error. No cluster."""

from __future__ import annotations

import pytest
import yaml

from dpjob_cli.errors import ExitCode
from dpjob_cli.main import main
from dpjob_cli.manifest import RunOptions, build_job
from dpjob_operator.api import kueue as k
from dpjob_operator.api.spec import parse_job

pytestmark = pytest.mark.unit


def dry_run(capsys, tmp_path, monkeypatch, *flags: str) -> tuple[int, dict, str]:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    (tmp_path / "train.py").write_text("print('hi')\n")
    code = main(["run", str(tmp_path / "train.py"), "--dry-run", *flags])
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out)) if code == ExitCode.OK else [{}]
    return code, docs[0], err


@pytest.mark.parametrize("flags, labels", [
    ([], {}),
    (["--queue", "team-a"], {"kueue.x-k8s.io/queue-name": "team-a"}),
    (["--queue", "team-a", "--priority", "high"],
     {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high"}),
])
def test_queue_and_priority_become_kueues_labels_on_the_job(flags, labels, capsys, tmp_path, monkeypatch):
    code, job, _ = dry_run(capsys, tmp_path, monkeypatch, *flags)
    assert code == ExitCode.OK
    kueue_labels = {key: v for key, v in job["metadata"]["labels"].items() if key.startswith("kueue.x-k8s.io/")}
    assert kueue_labels == labels
    assert job["metadata"]["labels"]["app.kubernetes.io/created-by"] == "dpjob-cli"


@pytest.mark.parametrize("flags, text", [
    (["--priority", "high"], "--priority needs --queue"),
    (["--queue", "Team A"], "'Team A' is not a valid name"),
    (["--queue", "q" * 64], "is not a valid name"),
    (["--queue", "team-a", "--priority", "-high"], "'-high' is not a valid name"),
])
def test_a_kueue_name_kueue_could_not_read_is_a_usage_error(flags, text, capsys, tmp_path, monkeypatch):
    code, _, err = dry_run(capsys, tmp_path, monkeypatch, *flags)
    assert code == ExitCode.USAGE and text in err and "Traceback" not in err


def test_the_job_the_operator_parses_names_its_queue():
    job = build_job(RunOptions(script="train.py", queue="team-a", priority="high"), "train-abcde", None)
    job["metadata"]["uid"] = "u1"
    parsed = parse_job(job)
    assert k.queue_name(parsed.labels) == "team-a" and parsed.labels[k.LABEL_PRIORITY_CLASS] == "high"


def test_status_says_where_kueue_queued_and_admitted_the_job():
    from dpjob_cli.status import render_status, status_view

    job = {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"replicas": 2},
           "status": {"phase": "Queued", "reason": "Evicted", "message": "evicted by Kueue (Preempted: ...)",
                      "kueue": {"workload": "dataparalleljob-train-6857e", "queue": "team-a", "evictions": 1}}}
    out = render_status(status_view(job, []))
    assert "Job train (namespace team-a): Queued" in out
    assert "kueue: LocalQueue team-a, Workload dataparalleljob-train-6857e, evicted 1 time(s)" in out
    job["status"]["kueue"].update(clusterQueue="team-cq", flavors=["a100"])
    assert "ClusterQueue team-cq (ResourceFlavors a100)" in render_status(status_view(job, []))


def test_the_wide_list_has_the_queue_column_of_kubectl_get_dpj_o_wide():
    from dpjob_cli.status import WIDE, list_row

    job = {"metadata": {"name": "train", "namespace": "team-a"}, "status": {"kueue": {"queue": "team-a"}}}
    assert ("queue", "queue") in WIDE and list_row(job)["queue"] == "team-a"
