"""`dpjob` behaves like kubectl: connection flags after the command, `run SCRIPT -- ARGS`, the
columns of `kubectl get dpj`, `-o wide|name|json|yaml`, `-l`, and `describe`. No cluster: the
SDK's Client is replaced by one that serves fixed jobs through the CLI's own pure views."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
import yaml

from dpjob_cli.describe import event_rows, render_describe
from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.main import main
from dpjob_cli.sdk import JobHandle
from dpjob_cli.status import list_row, status_view
from tests.support.paths import REPO

pytestmark = pytest.mark.unit

RUNNING = {"metadata": {"name": "train", "namespace": "team-a", "uid": "u1",
                        "creationTimestamp": "2026-11-23T10:00:00Z"},
           "spec": {"replicas": 2, "accelerator": "cpu", "runPolicy": {"backoffLimit": 3}},
           "status": {"phase": "Running", "reason": "Running", "ready": "2/2", "worldSize": 2, "restarts": 1,
                      "failureRestarts": 1, "restartsByReason": {"RankFailed": 1},
                      "progress": {"step": 420, "totalSteps": 1000, "percent": 42, "summary": "420/1000 (42%)",
                                   "remaining": "4m40s", "loss": 0.25, "samplesPerSecond": 812.5,
                                   "slowestRank": {"rank": 1, "ratio": 1.8}},
                      "lastFailure": {"rank": 1, "pod": "train-rank-1", "node": "n1", "container": "trainer",
                                      "exitCode": 3, "reason": "Error", "restart": 0,
                                      "message": "Traceback (most recent call last):\nZeroDivisionError: boom"},
                      "conditions": [{"type": "Running", "status": "True", "reason": "AllRanksRunning",
                                      "message": "2/2 ranks running"}]}}
EVENTS = [{"type": "Warning", "reason": "RankFailed", "message": "rank 1 failed: ZeroDivisionError",
           "lastTimestamp": "2026-11-23T10:01:00Z", "source": {"component": "dpjob-operator"}},
          {"type": "Normal", "reason": "Created", "message": "2 rank pods", "count": 2,
           "lastTimestamp": "2026-11-23T10:00:01Z", "source": {"component": "dpjob-operator"}}]


class FakeHandle:
    def __init__(self, job: dict[str, Any]) -> None:
        self.job, self.name, self.namespace = job, job["metadata"]["name"], job["metadata"]["namespace"]

    def status(self) -> dict[str, Any]:
        return status_view(self.job, [])

    def describe(self) -> dict[str, Any]:
        return {**self.status(), "restartsByReason": self.job["status"]["restartsByReason"],
                "events": event_rows(EVENTS)}

    def logs(self, *args: Any, **kwargs: Any) -> list[str]:
        return ["[rank 0] step 1"]

    def get(self) -> dict[str, Any]:
        return self.job

    def wait(self, *args: Any, **kwargs: Any) -> str:
        return "Running"

    def delete(self) -> None:
        pass


class FakeClient:
    """Records how it was made (namespace, kubeconfig, context) and the selector it was asked for."""

    made: ClassVar[list[tuple[str | None, str | None, str | None]]] = []
    selectors: ClassVar[list[str | None]] = []

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None) -> None:
        FakeClient.made.append((namespace, kubeconfig, context))
        self.namespace = namespace or "default"

    def job(self, name: str) -> FakeHandle:
        return FakeHandle(RUNNING)

    def list_jobs(self, all_namespaces: bool = False, selector: str | None = None) -> list[dict[str, Any]]:
        FakeClient.selectors.append(selector)
        return [list_row(RUNNING)]


@pytest.fixture(autouse=True)
def fake_cluster(monkeypatch):
    FakeClient.made, FakeClient.selectors = [], []
    monkeypatch.setattr("dpjob_cli.session.Client", FakeClient)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, connection", [
    (["logs", "train", "-n", "ns1"], ("ns1", None, None)),
    (["status", "train", "--namespace", "ns1"], ("ns1", None, None)),
    (["-n", "before", "describe", "train", "-n", "after"], ("after", None, None)),
    (["list", "--context", "c1", "--kubeconfig", "/k"], (None, "/k", "c1")),
    (["--context", "c1", "wait", "train", "-n", "ns2"], ("ns2", None, "c1")),
    (["delete", "train", "-n", "ns3"], ("ns3", None, None)),
])
def test_connection_flags_work_after_the_command_too(capsys, argv, connection):
    code, _, err = cli(capsys, *argv)
    assert code in (0, 1), err  # `wait` on a job that is not Succeeded exits 1; what matters is how it connected
    assert FakeClient.made[0] == connection


@pytest.mark.parametrize("tail, namespace, script_args", [
    (["-n", "team-a"], "team-a", []),
    (["-n", "team-a", "--", "--epochs", "3"], "team-a", ["--epochs", "3"]),
    (["--", "-n", "team-b", "--replicas", "9"], "default", ["-n", "team-b", "--replicas", "9"]),
    (["--lr", "0.1"], "default", ["--lr", "0.1"]),
])
def test_run_keeps_its_own_flags_and_gives_the_rest_after_dashdash_to_the_script(capsys, tmp_path, tail, namespace,
                                                                                   script_args):
    (tmp_path / "train.py").write_text("print('hi')\n")
    code, out, err = cli(capsys, "run", str(tmp_path / "train.py"), "--dry-run", *tail)
    job, _ = yaml.safe_load_all(out)
    assert code == 0, err
    assert job["metadata"]["namespace"] == namespace
    assert job["spec"]["replicas"] == 1
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][2:] == script_args


def printer_columns(wide: bool) -> list[str]:
    crd = yaml.safe_load((REPO / "crds" / "dataparalleljob.yaml").read_text())
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return ["NAME", *(c["name"].upper() for c in columns if wide or not c.get("priority"))]


@pytest.mark.parametrize("output, header, row", [
    ("table", printer_columns(wide=False), ["train", "Running", "2/2", "2", "cpu", "1", "420/1000", "(42%)", "4m40s"]),
    ("wide", printer_columns(wide=True), ["Running", "0.25", "812.5"]),
])
def test_list_shows_the_columns_of_kubectl_get_dpj(capsys, output, header, row):
    code, out, _ = cli(capsys, "list", "-o", output)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == header
    assert all(cell in lines[1].split() for cell in row), lines[1]


@pytest.mark.parametrize("argv, expected", [
    (["list", "-o", "name"], "dataparalleljob.dpjob.io/train"),
    (["status", "train", "-o", "name"], "dataparalleljob.dpjob.io/train"),
])
def test_output_name_is_the_resource_and_name(capsys, argv, expected):
    assert cli(capsys, *argv)[1].strip() == expected


@pytest.mark.parametrize("fmt, load", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_status_as_data_reads_the_progress_the_operator_wrote(capsys, fmt, load):
    view = load(cli(capsys, "status", "train", "-o", fmt)[1])
    assert view["progress"]["summary"] == "420/1000 (42%)" and view["progress"]["slowestRank"]["rank"] == 1


def test_status_shows_progress_eta_loss_and_the_slowest_rank(capsys):
    out = cli(capsys, "status", "train")[1]
    assert "progress: 420/1000 (42%), eta 4m40s, loss 0.25, 812.5 samples/s, slowest rank 1 (1.8x" in out


def test_list_passes_the_label_selector(capsys):
    cli(capsys, "list", "-l", "team=a,tier!=test")
    assert FakeClient.selectors == ["team=a,tier!=test"]


@pytest.mark.parametrize("text", [
    "Restarts:       1 (charged to backoffLimit: 1/3); by cause: RankFailed 1",
    "Last failure:   rank 1 (pod train-rank-1, node n1, container trainer) exit code 3 Error",
    "  ZeroDivisionError: boom",
    "Conditions:",
    "Events:",
])
def test_describe_shows_restarts_the_last_failure_conditions_and_events(capsys, text):
    code, out, _ = cli(capsys, "describe", "train")
    assert code == 0 and text in out


def test_describe_lists_events_oldest_first_with_their_count(capsys):
    out = cli(capsys, "describe", "train")[1]
    events = out[out.index("Events:"):].splitlines()[2:]
    assert [line.split()[1] for line in events] == ["Created", "RankFailed"]
    assert "(x2)" in events[0] and "dpjob-operator" in events[1]


def test_help_names_every_command(capsys):
    out = cli(capsys, "--help")[1]
    for command in ("run", "explain", "logs", "status", "describe", "list", "delete", "wait"):
        assert f"  {command} " in out, command


def test_cli_reference_documents_every_command_and_flag():
    import click

    from dpjob_cli.main import cli as group

    text = (REPO / "docs" / "cli.md").read_text()
    missing = [f"{name} {opt}" for name, command in group.commands.items() for param in command.params
               if isinstance(param, click.Option) for opt in param.opts
               if f"`{opt}" not in text and f", {opt}" not in text and opt != "--help"]
    missing += [name for name in group.commands if f"dpjob {name}" not in text]
    assert not missing, f"docs/cli.md does not mention: {missing}"


class FakeKube:
    """The three reads `JobHandle.describe` makes; ``events`` None: listing events is forbidden."""

    def __init__(self, events: list[dict[str, Any]] | None) -> None:
        self.events = events
        self.asked: list[tuple[str, str]] = []

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return RUNNING

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def list_events(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        self.asked.append((namespace, uid))
        if self.events is None:
            raise CliError(ExitCode.API_ERROR, "forbidden: events is forbidden")
        return self.events


@pytest.mark.parametrize("events, shown", [
    (EVENTS, "  Normal   Created"),
    ([], "Events: <none>"),
    (None, "Events: <cannot list them: forbidden: events is forbidden>"),
])
def test_describe_reads_the_events_of_this_job_and_survives_not_being_allowed_to(events, shown):
    kube = FakeKube(events)
    view = JobHandle(kube, "team-a", "train").describe()  # type: ignore[arg-type]
    assert kube.asked == [("team-a", "u1")]  # by uid: a previous job of the same name has other events
    assert view["restartsByReason"] == {"RankFailed": 1}
    assert shown in render_describe(view)
