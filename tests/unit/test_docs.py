"""The documentation renders, links and covers the API. What a reader would notice: a page that
shows half its text as one code block, a link that leads nowhere, a CRD field the reference never
names. Pages are parsed as CommonMark (markdown-it-py), what GitHub and most renderers build on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.support.paths import REPO

pytestmark = pytest.mark.unit

PAGES = sorted([*REPO.glob("*.md"), *(REPO / "docs").glob("*.md")])
API_PAGE = REPO / "docs" / "api.md"
CRD = REPO / "crds" / "dataparalleljob.yaml"
HEADING_LINE = re.compile(r"^#{1,6} \S")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def tokens(page: Path) -> list[Token]:
    return MarkdownIt("commonmark").parse(page.read_text())


def name(page: Path) -> str:
    return str(page.relative_to(REPO))


def walk(items: list[Token]) -> Iterator[Token]:
    for token in items:
        yield token
        yield from walk(token.children or [])


def heading_text(inline: Token) -> str:
    return "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-',
    a repeated anchor numbered -1, -2, ..."""
    items, seen, out = tokens(page), {}, set()
    for i, token in enumerate(items):
        if token.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", heading_text(items[i + 1]).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(page: Path) -> list[str]:
    return [str(t.attrGet("href")) for t in walk(tokens(page)) if t.type == "link_open"]


def test_the_pages_exist():
    assert {"README.md", "docs/api.md", "docs/cli.md", "docs/troubleshooting.md",
            "docs/benchmarks.md"} <= {name(p) for p in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_no_code_block_swallows_a_heading(page):
    """An unclosed fence, or text after a closing one, turns the rest of the page into code."""
    swallowed = [(t.map[0] + 1 if t.map else 0, line) for t in tokens(page) if t.type in ("fence", "code_block")
                 for line in t.content.splitlines() if HEADING_LINE.match(line) and line.startswith("##")]
    assert not swallowed, f"{name(page)}: code blocks contain headings (line of the block, heading): {swallowed}"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_resolves(page):
    broken = []
    for href in links(page):
        if SCHEME.match(href):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or REPO not in (target, *target.parents):
            broken.append(f"{href} (no such file in the repository)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{href} (no heading '{anchor}' in {name(target)})")
    assert not broken, f"{name(page)}: {broken}"


def schema_fields(node: dict[str, Any], path: tuple[str, ...], depth: int) -> Iterator[tuple[str, ...]]:
    props = node.get("properties") or (node.get("items") or {}).get("properties") or {}
    for key, sub in props.items():
        yield (*path, key)
        if depth > 1:
            yield from schema_fields(sub, (*path, key), depth - 1)


def crd_fields() -> list[tuple[str, ...]]:
    """Every field of spec and status, two levels deep: ('spec', 'runPolicy', 'backoffLimit')."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    return [(top, *field) for top in ("spec", "status") for field in schema_fields(schema[top], (), 2)]


def table_rows(section: str) -> list[tuple[set[str], set[str]]]:
    """(code spans of the first cell, code spans of the whole row) of each table row under '## section'."""
    text = API_PAGE.read_text()
    body = re.split(r"^## ", text, flags=re.M)
    part = next(p for p in body if p.split("\n", 1)[0].strip() == section)
    rows = []
    for line in part.splitlines():
        if line.startswith("|"):
            first = re.split(r"(?<!\\)\|", line)[1]
            rows.append((set(re.findall(r"`([^`]+)`", first)), set(re.findall(r"`([^`]+)`", line))))
    return rows


def documented(field: tuple[str, ...]) -> bool:
    """spec.X: a row of the spec table starts with `X` or `X.…`; spec.X.Y: a row starts with `X.Y`,
    or a row of `X` names `Y`."""
    top, *rest = field
    rows = table_rows(top)
    dotted = ".".join(rest)
    if len(rest) == 1:
        return any(dotted in first or any(s.startswith(dotted + ".") for s in first) for first, _ in rows)
    return any(dotted in first or (rest[0] in first and rest[1] in spans) for first, spans in rows)


@pytest.mark.parametrize("field", crd_fields(), ids=".".join)
def test_every_crd_field_is_in_the_api_reference(field):
    assert documented(field), f"{'.'.join(field)} is in {name(CRD)} but not in the {field[0]} table of docs/api.md"


def troubleshooting_reasons() -> list[str]:
    """The operator's reasons a user meets when a job waits, fails or stalls, by their constants, and
    the kubelet's reasons the Waiting condition groups: renaming one must update the page."""
    from dpjob_operator.reconcile import reasons as r
    from dpjob_operator.reconcile.waiting import CONFIG_REASONS, IMAGE_REASONS

    return sorted({r.WAITING, r.SUSPENDED, r.STALLED, r.IMAGE_PULL_ERROR, r.CONTAINER_CONFIG_ERROR, r.UNSCHEDULABLE,
                   r.GANG_UNSCHEDULABLE, r.STARTING, r.PODS_SCHEDULED, r.POOL_AVAILABLE, r.POOL_NOT_CONFIGURED,
                   r.FAILED_CREATE_POD, r.ENVIRONMENT_WRITE_FAILED, r.RANK_TABLE_WRITE_FAILED, r.RANK_FAILED,
                   r.BACKOFF_LIMIT_EXCEEDED, r.PERMANENT_ERROR, r.STARTUP_TIMEOUT, r.PROGRESSING, r.STRAGGLER,
                   r.STUCK_TERMINATING, r.NODE_NOT_READY, r.POD_STUCK_TERMINATING, r.INVALID_SPEC, r.NODE_LOST,
                   r.NODES_HEALTHY,
                   *IMAGE_REASONS, *CONFIG_REASONS})


@pytest.mark.parametrize("reason", troubleshooting_reasons())
def test_troubleshooting_names_the_reasons_the_operator_writes(reason):
    """In a code span, alone or as in `PodsScheduled=False/GangUnschedulable`."""
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    assert re.search(rf"`[^`\n]*\b{reason}\b[^`\n]*`", text), f"docs/troubleshooting.md does not name `{reason}`"
