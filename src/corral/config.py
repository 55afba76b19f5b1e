"""Daemon settings: one pydantic-settings class, built once at start and then injected.

Values come from keyword arguments (the CLI flags), then ``CORRAL_*`` environment variables, then
the defaults below. Nothing here reads the environment at import time.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.at_rest import make_private_dir

DEFAULT_DATA_DIR = Path("/var/lib/corral")
DEFAULT_LISTEN = "127.0.0.1:7070"
# network/policy.py's NetworkMode values (not imported: settings stay light for the CLI)
NETWORK_MODES = ("project_internet", "internet", "project", "airgapped")


def _host_cpus() -> int:
    return os.cpu_count() or 1


def _host_memory_mib() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("cannot read MemTotal from /proc/meminfo")


class Settings(BaseSettings):
    """Workspace settings. Capacity fields left at 0 are derived from the host, less a reserve.

    Invariant after ``resolved()``: every capacity field is positive and the ceilings are no larger
    than the totals.
    """

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    data_dir: Path = DEFAULT_DATA_DIR
    # Prebuilt read-only images (the `base` that scripts/setup debootstraps). Host-wide, not per
    # data dir: every workspace on the host uses the same immutable images.
    images_dir: Path = DEFAULT_DATA_DIR / "images"
    listen: str = DEFAULT_LISTEN

    # Workspace capacity (0 = derive from the host).
    cpus: float = 0
    memory_mib: int = 0
    disk_mib: int = 0
    cpu_overcommit: int = Field(default=8, ge=1, le=64)
    reserve_memory_mib: int = 1024
    reserve_disk_mib: int = 4096

    # Per-sandbox defaults and ceilings (policy).
    default_cpu: float = 1.0
    default_memory_mib: int = 512
    default_disk_mib: int = 2048
    max_cpu: float = 8.0
    max_memory_mib: int = 8192
    max_disk_mib: int = 20480
    max_ttl_seconds: int = 7 * 24 * 3600
    # How long the records of ended (killed, stopped) sandboxes stay listed (`ls --all`, `info`).
    ended_retention_seconds: int = Field(default=24 * 3600, ge=1)
    default_pids: int = 4096
    # Files-only snapshots: the most files (image's included) a sandbox may hold to be captured.
    snapshot_max_files: int = Field(default=200_000, ge=100, le=5_000_000)

    # Template builds. The daemon reads no host path for a build, except docker-archive:/oci:
    # paths inside ``import_dir`` (an admin's choice; unset: none). Contexts and image archives
    # are uploaded, each bounded by ``build_upload_max_mib`` (packed and unpacked) and
    # ``build_upload_max_files`` members; at most ``build_uploads_pending`` wait for their build.
    import_dir: Path | None = None
    build_upload_max_mib: int = Field(default=2048, ge=1)
    build_upload_max_files: int = Field(default=100_000, ge=1)
    build_uploads_pending: int = Field(default=16, ge=1)
    build_upload_ttl_seconds: float = Field(default=3600.0, gt=0)
    # A build sandbox's disk (its new layer; ENOSPC past it), a step's time limit (a build may
    # ask for another) and the output kept in a build's log.
    build_disk_mib: int = Field(default=4096, ge=8)
    build_step_timeout: float = Field(default=1800.0, gt=0)
    build_log_max_kib: int = Field(default=2048, ge=1)

    # Runtime and network.
    runsc: str = "runsc"
    runsc_platform: str = "systrap"
    network_prefix: str = "corral"
    network_subnet: str = "10.200.0.0/16"
    # A booting sandbox's agent is waited for while the sandbox runs and uses CPU: each window
    # of agent_ready_timeout seconds without an answer must show CPU used (else the boot is
    # stuck and fails), and the whole wait is at most agent_ready_limit seconds.
    agent_ready_timeout: float = Field(default=20.0, gt=0)
    agent_ready_limit: float = Field(default=300.0, gt=0)
    # Host memory kept available: a boot that would leave less is refused up front for
    # capacity (service/sandboxes/host_room.py), as are boots past the host's task limits or
    # the daemon's open-file limit.
    host_reserve_memory_mib: int = Field(default=512, ge=0)
    # Which in-sandbox agent runs as every sandbox's init (docs/agent-protocol.md): "go" (the
    # static binary scripts/setup builds from src/corral/agent/go) or "python" (src/corral/agent,
    # on the host's interpreter). Both speak the same protocol.
    agent: Literal["python", "go"] = "go"
    # The Go agent's binary (default: the one scripts/setup builds in the source tree). The
    # daemon keeps a copy of every build it ran under data_dir/agent/go, by content, so sandboxes
    # parked before a rebuild wake on the build they started from (runtime/inject.py).
    agent_binary: Path | None = None
    # A running sandbox nobody called for this long is frozen (costs no CPU) and thawed before
    # the next call reaches it (docs/lifecycle.md); 0 never freezes.
    freeze_idle_seconds: float = Field(default=30.0, ge=0)
    # The agent ends a process at its exec timeout; when the agent itself cannot (a fork bomb
    # starves it of CPU inside gVisor), the daemon ends the exec's stream this much later with
    # ``timed_out`` and asks the agent to kill the process once it can (service/processes.py).
    exec_timeout_grace_seconds: float = Field(default=10.0, gt=0)
    # The fewest host CPUs gVisor itself runs a sandbox on (its processes still see ceil(cpu),
    # runtime/generation.py). 2: a sandbox that sat idle answers at once, but an unfrozen idle
    # one costs about twice the host CPU and ~3 MiB more; 1: the reverse, every call after an
    # idle spell 10-20 ms late (bench/idle_wakeup.py).
    sandbox_min_cpus: int = Field(default=2, ge=1)
    # Boots (creates, wakes, restores) in flight at once; more wait their turn before they start,
    # so that each started one gets the CPU to bring its agent up within agent_ready_timeout
    # (0: two per host CPU).
    max_concurrent_boots: int = Field(default=0, ge=0)
    # Egress (docs/network.md): the modes sandboxes may use (comma-separated; the first is the
    # default of `corral new`), the resolvers the sandboxes' DNS goes to (comma-separated IPv4;
    # empty: the host's /etc/resolv.conf) and the interfaces internet egress leaves by (empty:
    # those of the host's default routes). With only airgapped allowed nothing is forwarded.
    network_modes: str = "project_internet,internet,project,airgapped"
    dns_upstreams: str = ""
    egress_uplinks: str = ""
    log_level: str = "info"
    # Answer every API call with a Server-Timing header: the time of each step on its path
    # (runsc calls, commits, slot and disk handling; corral/timing.py). For benches.
    server_timing: bool = False
    # The credential broker (docs/secrets.md): the CA bundle upstream certificates are verified
    # against when the broker intercepts a connection (empty: the host's trust store).
    broker_upstream_ca: Path | None = None

    # Bounds on what callers and sandboxes send (each refusal says which bound; docs/security.md).
    max_json_body_kib: int = Field(default=1024, ge=16)  # any JSON request body: HTTP 413 past it
    max_stdin_chunk_kib: int = Field(default=1024, ge=1)  # one POST .../stdin body
    max_import_mib: int = Field(default=0, ge=0)  # one import upload; 0 = max_memory + max_disk
    console_log_kib: int = Field(default=1024, ge=64)  # a sandbox's host console.log (a tmpfs)
    # The HTTP server: at most this many connections at once (more get 503), idle keep-alive
    # connections closed after this many seconds, a request head of at most this many KiB, and
    # the listen backlog.
    http_limit_concurrency: int = Field(default=1024, ge=16)
    http_timeout_keep_alive: int = Field(default=5, ge=1)
    http_max_head_kib: int = Field(default=64, ge=4)
    http_backlog: int = Field(default=256, ge=16)
    # Requests per second an API key that is not an admin may make (a key's own limit wins;
    # 0: none). Bursts of two seconds' worth pass.
    key_rate_limit: float = Field(default=50.0, ge=0)
    # Inbound ports (docs/network.md): the URL users reach this daemon at (default: the listen
    # address), and the domain of host-name routes ``PORT-ID.<domain>`` (default: ``localhost``
    # when the daemon listens on loopback, where browsers and curl resolve it; else none).
    public_url: str = ""
    ports_domain: str = ""
    # Crash tests only: the daemon SIGKILLs itself at this named step (e.g. "park:after-image").
    crash_at: str | None = None

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
        return value

    @field_validator("network_modes")
    @classmethod
    def _check_network_modes(cls, value: str) -> str:
        modes = [m.strip().lower() for m in value.split(",") if m.strip()]
        unknown = [m for m in modes if m not in NETWORK_MODES]
        if unknown:
            raise ValueError(f"unknown network modes {unknown}: use {', '.join(NETWORK_MODES)}")
        if not modes:
            raise ValueError("network_modes names at least one mode")
        return ",".join(dict.fromkeys(modes))

    @property
    def allowed_network_modes(self) -> list[str]:
        return self.network_modes.split(",")

    @property
    def egress_allowed(self) -> bool:
        """Whether any allowed mode leaves the host: the internet modes, and the project modes
        (the project's services are forwarded too). Only airgapped: no forwarding at all."""
        return any(mode != "airgapped" for mode in self.allowed_network_modes)

    @property
    def dns_upstream_list(self) -> list[str] | None:
        found = [a.strip() for a in self.dns_upstreams.split(",") if a.strip()]
        return found or None

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def base_url(self) -> str:
        """The URL users reach the daemon at, without a trailing slash."""
        return (self.public_url or f"http://{self.listen}").rstrip("/")

    @property
    def inbound_domain(self) -> str | None:
        """The domain of host-name routes to sandbox ports, if any."""
        if self.ports_domain:
            return self.ports_domain.strip(".").lower()
        loopback = self.host in ("localhost", "::1") or self.host.startswith("127.")
        return "localhost" if loopback and not self.public_url else None

    @property
    def sandboxes_dir(self) -> Path:
        return self.data_dir / "sandboxes"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "corral.db"

    @property
    def admin_key_path(self) -> Path:
        return self.data_dir / "admin.key"

    @property
    def signing_key_path(self) -> Path:
        """This workspace's ed25519 key that signs its exports (mode 0600, made at first start)."""
        return self.data_dir / "signing.key"

    @property
    def secrets_key_path(self) -> Path:
        """The AES key that seals secret values (mode 0600, made at first use)."""
        return self.data_dir / "secrets.key"

    @property
    def broker_dir(self) -> Path:
        """The broker's CA (``ca.pem``, ``ca.key`` 0600)."""
        return self.data_dir / "broker"

    def resolved(self) -> Settings:
        """Return a copy with host-derived capacity filled in and ceilings clamped to it."""
        cpus = self.cpus or float(_host_cpus())
        memory = self.memory_mib or max(256, _host_memory_mib() - self.reserve_memory_mib)
        disk = self.disk_mib
        if not disk:
            make_private_dir(self.data_dir)  # 0700 from the first start (see at_rest.py)
            free = shutil.disk_usage(self.data_dir).free // (1024 * 1024)
            disk = max(1024, free - self.reserve_disk_mib)
        return self.model_copy(
            update={
                "cpus": cpus,
                "memory_mib": memory,
                "disk_mib": disk,
                "max_memory_mib": min(self.max_memory_mib, memory),
                "max_disk_mib": min(self.max_disk_mib, disk),
                "max_import_mib": self.max_import_mib
                or min(self.max_memory_mib, memory) + min(self.max_disk_mib, disk),
            }
        )
