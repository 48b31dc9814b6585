"""API server answers -> one line a user can act on (pure: status code and body in, CliError out).

``kube.py`` catches the client's exceptions and hands their status and body here, so the rules
("a 404 without a Status body means the CRD is not served") are tested without a cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dpjob_cli.errors import CliError, ExitCode

_OBJECT_VALUE = re.compile(r'^Invalid value: "object": ')
CRD_HINT = ("install it with `helm install dpjob oci://ghcr.io/dpjob/charts/dpjob-operator -n dpjob-system "
            "--create-namespace` (docs/install.md; or `kubectl apply --server-side -f crds/`)")


@dataclass(frozen=True)
class Target:
    """What a request was about, so a 404 or 409 can name it."""

    kind: str  # "DataParallelJob", "pod", "ConfigMap", ...
    name: str | None
    namespace: str | None
    server: str
    kubeconfig: str

    def where(self) -> str:
        ns = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.kind} {self.name}{ns}" if self.name else f"{self.kind}s{ns}"


def parse_status(body: str | bytes | None) -> dict[str, Any] | None:
    """The API server's ``Status`` object, or None when the body is not one (e.g. ``404 page not found``)."""
    if not body:
        return None
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return data
    return None


def field_lines(status: dict[str, Any]) -> tuple[str, ...]:
    """One ``field: message`` line per cause of a 422, as the CRD schema and CEL rules report them."""
    causes = (status.get("details") or {}).get("causes") or []
    lines = []
    for cause in causes:
        field = cause.get("field") or ""
        message = str(cause.get("message") or cause.get("reason") or "").strip()
        # CEL rules on an object say 'Invalid value: "object": <rule message>': the rule's message is the news.
        message = _OBJECT_VALUE.sub("", message)
        # The API server repeats the field at the start of some messages; say it once.
        if field and message.startswith(f"{field}: "):
            message = message[len(field) + 2:]
        lines.append(f"{field}: {message}" if field else message)
    return tuple(lines)


def _not_found(status: dict[str, Any] | None, target: Target) -> CliError:
    details = (status or {}).get("details") or {}
    served = bool(details.get("kind"))
    if details.get("kind") == "namespaces":
        return CliError(ExitCode.NOT_FOUND, f"namespace {details.get('name', target.namespace)} does not exist")
    if target.kind == "DataParallelJob" and not served:
        return CliError(ExitCode.CRD_MISSING,
                        f"the DataParallelJob CRD (dataparalleljobs.dpjob.io) is not installed on {target.server}: "
                        + CRD_HINT)
    if target.kind == "DataParallelJob" and target.name:
        return CliError(ExitCode.NOT_FOUND,
                        f"no DataParallelJob {target.name!r} in namespace {target.namespace} "
                        "(`dpjob list` shows the jobs there; -n selects another namespace)")
    return CliError(ExitCode.NOT_FOUND, f"{target.where()} not found")


def _message(status: dict[str, Any] | None, body: str | bytes | None, status_code: int) -> str:
    if status is not None:
        return str(status.get("message") or status.get("reason") or f"HTTP {status_code}")
    text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
    return text.strip()[:200] or f"HTTP {status_code}"


def translate_api_error(status_code: int, body: str | bytes | None, target: Target) -> CliError:
    """Map an HTTP error of the API server to the CliError a user sees."""
    status = parse_status(body)
    message = _message(status, body, status_code)
    if status_code == 404:
        return _not_found(status, target)
    if status_code == 422 and status is not None:
        lines = field_lines(status) or (str(status.get("message")),)
        return CliError(ExitCode.INVALID_SPEC, f"invalid spec: {lines[0]}",
                        tuple(f"invalid spec: {x}" for x in lines[1:]))
    if status_code == 401:
        return CliError(ExitCode.NO_CLUSTER,
                        f"no cluster access: {target.server} rejected the credentials of kubeconfig "
                        f"{target.kubeconfig} (401 Unauthorized)")
    if status_code == 403:
        return CliError(ExitCode.API_ERROR, f"forbidden: {message}")
    if status_code == 409:
        return CliError(ExitCode.API_ERROR,
                        f"{target.where()} already exists (pick another --name, or `dpjob delete {target.name}`)")
    if status_code == 400 and status is not None and target.kind == "DataParallelJob":
        return CliError(ExitCode.INVALID_SPEC, f"invalid spec: {message}")  # e.g. strict decoding: unknown field
    return CliError(ExitCode.API_ERROR, f"API server error {status_code} on {target.where()}: {message}")


def unreachable(server: str, kubeconfig: str, reason: str) -> CliError:
    """No answer at all: wrong server, cluster down, TLS mismatch."""
    return CliError(ExitCode.NO_CLUSTER,
                    f"no cluster access: cannot reach {server} ({reason}); kubeconfig: {kubeconfig}")


def no_kubeconfig(kubeconfig: str, reason: str) -> CliError:
    """The kubeconfig itself is missing or unusable."""
    return CliError(ExitCode.NO_CLUSTER,
                    f"no cluster access: {reason} (kubeconfig: {kubeconfig}; set KUBECONFIG or pass --kubeconfig)")
