"""Who may read ``/metrics``: the API server decides (TokenReview, then SubjectAccessReview).

This is controller-runtime's ``filters.WithAuthenticationAndAuthorization`` and kube-rbac-proxy's
rule, the one the kubelet applies to its own ``/metrics``: a scraper presents its ServiceAccount
token as a bearer token; the API server says who it is (TokenReview) and whether that identity
may ``get`` the non-resource URL ``/metrics`` (SubjectAccessReview). A ClusterRole with
``nonResourceURLs: [/metrics]`` grants it, as for any Kubernetes component.

Answers are cached for ``ttl`` seconds per token (by its SHA-256, never the token itself) so a
scrape every few seconds costs two API calls a couple of times a minute, not two per scrape; a
revoked binding takes effect within the TTL, as with the kubelet's webhook authorizer cache.
The cache is a bounded dict swapped under a lock; errors talking to the API server answer 503
and are not cached.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger("dpjob.metrics.auth")

REVIEW_TIMEOUT = (5, 10)   # (connect, read) seconds: a scrape must not wait on a wedged API server
CACHE_TTL_SECONDS = 60.0
CACHE_MAX_ENTRIES = 1024


@dataclass(frozen=True)
class Verdict:
    """An HTTP answer to one request: 200 lets it through; 401/403/503 say why not."""

    status: int
    reason: str
    user: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class DelegatedAuthorizer:
    """Authenticate and authorize scrapers through the API server, with a per-token TTL cache."""

    def __init__(self, api: client.ApiClient, path: str = "/metrics", ttl: float = CACHE_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._authn = client.AuthenticationV1Api(api)
        self._authz = client.AuthorizationV1Api(api)
        self._path = path
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Verdict]] = {}

    def verdict(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            return Verdict(401, "a bearer token is required (a ServiceAccount token allowed to get /metrics)")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            answer = self._review(token)
        except (ApiException, HTTPError, OSError) as exc:  # the API server is down or slow: do not cache
            log.warning("metrics authorization: the API server did not answer: %s", exc)
            return Verdict(503, "the API server did not answer the token review; try again")
        with self._lock:
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache[key] = (now + self._ttl, answer)
        return answer

    def _review(self, token: str) -> Verdict:
        review = self._authn.create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)), _request_timeout=REVIEW_TIMEOUT)
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return Verdict(401, "the token is not valid")
        user = status.user
        sar = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user.username, groups=user.groups, uid=user.uid, extra=user.extra,
            non_resource_attributes=client.V1NonResourceAttributes(path=self._path, verb="get")))
        decision = self._authz.create_subject_access_review(sar, _request_timeout=REVIEW_TIMEOUT).status
        if decision is None or not decision.allowed:
            return Verdict(403, f"{user.username} may not get {self._path}", user.username or "")
        return Verdict(200, "ok", user.username or "")
