"""The workspace policy: what the workspace allows whatever a caller asks.

Fields (``corral policy show``; defaults are the daemon's settings, so an unset policy changes
nothing):

- ``max_cpu``, ``max_memory_mib``, ``max_disk_mib``: per-sandbox ceilings (a template may set
  lower ones); never above the daemon's own (``CORRAL_MAX_*``);
- ``max_ttl_seconds``: the longest a sandbox may be given to live; ``default_ttl_seconds``: what a
  sandbox created without a TTL gets (None: no TTL);
- ``network_modes``: the allowed network modes (the first is the default), a subset of the
  daemon's ``CORRAL_NETWORK_MODES``;
- ``member_rule_kinds`` and ``member_min_prefix``: the shapes of egress allow rules a key that is
  not an admin may give: rule kinds (``cidr``, ``host``, ``wildcard``, ``project``) and the
  shortest CIDR prefix (8 refuses ``0.0.0.0/0`` and ``1.0.0.0/7``);
- ``templates``: patterns (``fnmatch``) of the templates sandboxes may be made from (None: any);
- ``runtimes``: the runtimes sandboxes may run on (None: any the daemon has);
- ``max_forks``: the most sandboxes one fork call may make.

A change applies to the next request at once (every check reads the current policy) and is
audited like every mutating call. Refusals of the new dimensions are ``PolicyDenied`` (403
``policy``) naming the field; ceilings, TTL and modes keep their ``invalid`` answers, naming the
policy's limit.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from corral.config import Settings
from corral.network.policy import EgressRule, NetworkMode, PolicyError
from corral.service.access import Principal, acting
from corral.service.errors import CorralError, InvalidRequest
from corral.storage import Database

RULE_KINDS = ("cidr", "host", "wildcard", "project")
MAX_FORKS = 64
MAX_PATTERNS = 64


class PolicyDenied(CorralError):
    """The workspace policy does not allow the request."""

    code = "policy"


@dataclass(frozen=True)
class WorkspacePolicy:
    max_cpu: float
    max_memory_mib: int
    max_disk_mib: int
    max_ttl_seconds: int
    default_ttl_seconds: int | None = None
    network_modes: list[str] = field(default_factory=list)
    member_rule_kinds: list[str] = field(default_factory=lambda: list(RULE_KINDS))
    member_min_prefix: int = 0
    templates: list[str] | None = None
    runtimes: list[str] | None = None
    max_forks: int = MAX_FORKS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = tuple(f.name for f in fields(WorkspacePolicy))


class PolicyService:
    """Holds the current policy (read from the store at start, replaced whole by ``update``)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._current = self._from_stored(db.policy.load())

    def defaults(self) -> WorkspacePolicy:
        s = self._settings
        return WorkspacePolicy(
            max_cpu=s.max_cpu,
            max_memory_mib=s.max_memory_mib,
            max_disk_mib=s.max_disk_mib,
            max_ttl_seconds=s.max_ttl_seconds,
            network_modes=list(s.allowed_network_modes),
        )

    def _from_stored(self, stored: dict[str, Any]) -> WorkspacePolicy:
        try:
            return self._validated(self.defaults(), stored)
        except InvalidRequest:
            # A stored policy the daemon's settings no longer allow (e.g. a narrower
            # CORRAL_NETWORK_MODES): the settings win; an admin sets the policy again.
            return self.defaults()

    def current(self) -> WorkspacePolicy:
        return self._current

    def update(self, changes: dict[str, Any]) -> WorkspacePolicy:
        """Apply ``changes`` (field -> value; None resets a field to its default) and store it."""
        policy = self._validated(self._current, changes)
        stored = {k: v for k, v in policy.to_json().items() if v != getattr(self.defaults(), k)}
        self._db.policy.save(stored)
        self._current = policy
        return policy

    def _validated(self, base: WorkspacePolicy, changes: dict[str, Any]) -> WorkspacePolicy:
        s = self._settings
        defaults = self.defaults()
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise InvalidRequest(
                f"unknown policy fields {', '.join(unknown)} (known: {', '.join(FIELDS)})"
            )
        values = {k: (getattr(defaults, k) if v is None else v) for k, v in changes.items()}
        policy = replace(base, **values)
        problems = []
        for name, hard in (
            ("max_cpu", s.max_cpu),
            ("max_memory_mib", s.max_memory_mib),
            ("max_disk_mib", s.max_disk_mib),
            ("max_ttl_seconds", s.max_ttl_seconds),
        ):
            value = getattr(policy, name)
            if not 0 < value <= hard:
                problems.append(f"{name} must be above 0 and at most the daemon's {hard:g}")
        ttl = policy.default_ttl_seconds
        if ttl is not None and not 0 < ttl <= policy.max_ttl_seconds:
            problems.append(f"default_ttl_seconds must be 1..max_ttl_seconds, got {ttl}")
        modes = list(dict.fromkeys(policy.network_modes))
        outside = [m for m in modes if m not in s.allowed_network_modes]
        if not modes or outside:
            problems.append(
                "network_modes must name at least one of the daemon's modes "
                f"({', '.join(s.allowed_network_modes)})"
                + (f"; not available: {', '.join(outside)}" if outside else "")
            )
        bad_kinds = [k for k in policy.member_rule_kinds if k not in RULE_KINDS]
        if bad_kinds:
            problems.append(f"member_rule_kinds must be among {', '.join(RULE_KINDS)}")
        if not 0 <= policy.member_min_prefix <= 32:
            problems.append("member_min_prefix must be 0..32")
        for name in ("templates", "runtimes"):
            patterns = getattr(policy, name)
            if patterns is not None and (
                len(patterns) > MAX_PATTERNS
                or not all(isinstance(p, str) and 0 < len(p) <= 128 for p in patterns)
            ):
                problems.append(f"{name} must be at most {MAX_PATTERNS} names of 1-128 characters")
        if not 1 <= policy.max_forks <= MAX_FORKS:
            problems.append(f"max_forks must be 1..{MAX_FORKS}")
        if problems:
            raise InvalidRequest("invalid workspace policy: " + "; ".join(problems))
        return replace(
            policy,
            network_modes=modes,
            member_rule_kinds=list(dict.fromkeys(policy.member_rule_kinds)),
        )

    # ---------------------------------------------------------------------------- checks
    def check_template(self, name: str) -> None:
        patterns = self._current.templates
        base = name.partition(":")[0]
        if patterns is None or any(
            fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(base, p) for p in patterns
        ):
            return
        raise PolicyDenied(
            f"the workspace policy does not allow sandboxes from template {name!r} "
            f"(allowed templates: {', '.join(patterns) or 'none'}); ask an admin"
        )

    def check_runtime(self, runtime: str) -> None:
        allowed = self._current.runtimes
        if allowed is None or runtime in allowed:
            return
        raise PolicyDenied(
            f"the workspace policy does not allow the runtime {runtime!r} "
            f"(allowed runtimes: {', '.join(allowed) or 'none'}); ask an admin"
        )

    def check_forks(self, count: int) -> None:
        limit = self._current.max_forks
        if count > limit:
            raise PolicyDenied(
                f"the workspace policy allows at most {limit} forks per call; "
                f"{count} asked, {count - limit} over"
            )

    def check_mode(self, mode: NetworkMode) -> None:
        allowed = self._current.network_modes
        if mode.value not in allowed:
            raise InvalidRequest(
                f"network mode {mode.value!r} is not allowed by the workspace policy "
                f"(allowed: {', '.join(allowed)}); ask an admin or pick another mode"
            )

    def default_mode(self) -> str:
        return self._current.network_modes[0]

    def check_rules(self, allow: Iterable[str], principal: Principal | None = None) -> None:
        """Refuse allow rules whose shape the policy keeps from keys that are not admins."""
        who = principal or acting()
        if who.is_admin:
            return
        policy = self._current
        for text in allow:
            try:
                rule = EgressRule.parse(text)
            except PolicyError:
                continue  # the parser reports it with the rest of the request
            kind: str = rule.kind
            if kind == "host" and rule.host is not None and rule.host.startswith("*."):
                kind = "wildcard"
            if kind not in policy.member_rule_kinds:
                raise PolicyDenied(
                    f"the workspace policy does not let API key {who.name!r} allow {kind} rules "
                    f"such as {text!r} (allowed kinds: "
                    f"{', '.join(policy.member_rule_kinds) or 'none'}); ask an admin"
                )
            if rule.network is not None and rule.network.prefixlen < policy.member_min_prefix:
                short = policy.member_min_prefix - rule.network.prefixlen
                raise PolicyDenied(
                    f"the workspace policy does not let API key {who.name!r} allow {text!r}: "
                    f"its prefix /{rule.network.prefixlen} is shorter than the policy's "
                    f"/{policy.member_min_prefix} by {short}"
                )
