"""`dpjob logs --tail N --since DURATION -p --timestamps` as kubectl's flags: the duration parser, the
mapping to the API's pod-log arguments, the refusal of `--previous` with `--follow`, and what the
command hands the SDK. No cluster: the SDK's Client is replaced by one that records the call."""

from __future__ import annotations

from typing import Any, ClassVar

import click
import pytest

from dpjob_cli.errors import CliError, ExitCode
from dpjob_cli.log_options import DURATION_FORM, LogOptions, conflict, duration_seconds, parse_duration
from dpjob_cli.main import main
from dpjob_cli.sdk import JobHandle

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, seconds", [
    ("5s", 5), ("2m", 120), ("1h", 3600), ("1h30m", 5400), ("1h0m1s", 3601), ("90s", 90), ("2m30s", 150),
    (" 10m ", 600),
])
def test_durations_like_kubectl_since(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "s", "5x", "1.5h", "-5s", "5 s", "30m1h", "1d", "0s", "0h0m", "5sec"])
def test_a_bad_duration_names_the_accepted_form(text):
    with pytest.raises(ValueError) as err:
        parse_duration(text)
    assert DURATION_FORM in str(err.value) and repr(text) in str(err.value)


def test_the_click_callback_turns_a_bad_duration_into_bad_parameter():
    assert duration_seconds(None, None, "2m") == 120
    assert duration_seconds(None, None, None) is None  # --since not given: every line
    with pytest.raises(click.BadParameter, match="like 5s, 2m, 1h"):
        duration_seconds(None, None, "soon")


@pytest.mark.parametrize("options, kwargs", [
    (LogOptions(), {}),
    (LogOptions(tail=0), {"tail_lines": 0}),
    (LogOptions(tail=20), {"tail_lines": 20}),
    (LogOptions(since_seconds=300), {"since_seconds": 300}),
    (LogOptions(previous=True), {"previous": True}),
    (LogOptions(timestamps=True), {"timestamps": True}),
    (LogOptions(tail=5, since_seconds=60, previous=True, timestamps=True),
     {"tail_lines": 5, "since_seconds": 60, "previous": True, "timestamps": True}),
])
def test_options_map_to_read_namespaced_pod_log_arguments(options, kwargs):
    assert options.api_kwargs() == kwargs


@pytest.mark.parametrize("options, follow, refused", [
    (LogOptions(previous=True), True, True),
    (LogOptions(previous=True), False, False),
    (LogOptions(tail=5, since_seconds=60, timestamps=True), True, False),
])
def test_previous_cannot_be_followed(options, follow, refused):
    assert (conflict(options, follow) is not None) == refused


def test_a_container_that_starts_while_following_is_read_whole_with_timestamps_as_asked():
    assert LogOptions(tail=5, since_seconds=60, timestamps=True).for_later_container() == LogOptions(timestamps=True)
    assert LogOptions(tail=5).for_later_container() == LogOptions()


class RecordingHandle:
    name, namespace = "train", "default"
    calls: ClassVar[list[tuple[tuple[Any, ...], dict[str, Any]]]] = []

    def logs(self, *args: Any, **kwargs: Any) -> list[str]:
        RecordingHandle.calls.append((args, kwargs))
        return ["step 1"]


class RecordingClient:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.namespace = "default"

    def job(self, name: str) -> RecordingHandle:
        return RecordingHandle()


@pytest.fixture(autouse=True)
def fake_cluster(monkeypatch):
    RecordingHandle.calls = []
    monkeypatch.setattr("dpjob_cli.session.Client", RecordingClient)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


@pytest.mark.parametrize("flags, options", [
    ([], LogOptions()),
    (["--tail", "20"], LogOptions(tail=20)),
    (["--since", "1h30m"], LogOptions(since_seconds=5400)),
    (["-p"], LogOptions(previous=True)),
    (["--previous", "--timestamps", "--tail=3"], LogOptions(tail=3, previous=True, timestamps=True)),
    (["-f", "--since", "5s", "--timestamps"], LogOptions(since_seconds=5, timestamps=True)),
])
def test_the_command_hands_the_sdk_the_options_the_flags_say(capsys, flags, options):
    assert main(["logs", "train", *flags]) == 0
    assert capsys.readouterr().out == "step 1\n"
    (_, kwargs), = RecordingHandle.calls
    assert kwargs["options"] == options


@pytest.mark.parametrize("flags, text", [
    (["-p", "-f"], "--previous and --follow exclude each other"),
    (["--since", "5x"], "Invalid value for '--since': expected a duration like 5s, 2m, 1h or 1h30m"),
    (["--since", "0s"], "of at least 1s, got '0s'"),
    (["--tail", "-1"], "-1 is not in the range x>=0"),
])
def test_bad_log_flags_are_usage_errors_before_any_cluster_call(capsys, flags, text):
    assert main(["logs", "train", *flags]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
    assert RecordingHandle.calls == []


def test_the_sdk_refuses_previous_with_follow_too():
    handle = JobHandle(kube=None, namespace="default", name="train")  # type: ignore[arg-type]
    with pytest.raises(CliError) as err:
        next(handle.logs(follow=True, options=LogOptions(previous=True)))
    assert err.value.code == ExitCode.USAGE and "--previous and --follow" in err.value.message
