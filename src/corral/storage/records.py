"""Plain records the repositories hand to the service (no ORM state attached)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SandboxRecord:
    """One sandbox as recorded. ``operation`` names an action in flight (e.g. ``creating``)
    so that a daemon killed mid-way can tell, at the next start, what was interrupted."""

    id: str
    state: str
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    error: str | None = None
    slot_index: int | None = None
    operation: str | None = None
    secret_keys: list[str] = field(default_factory=list)
    on_timeout: str = "kill"
    auto_park_idle: int | None = None
    auto_wake: bool = False
    image_path: str | None = None
    image_mib: int = 0
    parent_id: str | None = None
    last_active_at: float | None = None
    pooled: bool = False
    # The egress policy (``EgressPolicy.dumps``); None: the default mode, no rules.
    network: str | None = None
    # The id of the API key that made it; None: the workspace's own (a pool's, or older).
    owner: str | None = None
    # Network traffic counted in the slots it has left (park); a live slot's counts add to it.
    net_rx_bytes: int = 0
    net_rx_packets: int = 0
    net_tx_bytes: int = 0
    net_tx_packets: int = 0


@dataclass(frozen=True)
class ProjectServiceRecord:
    """A service of the project: sandboxes in a project mode resolve ``name`` to ``address``
    and reach it on ``ports``."""

    name: str
    address: str
    ports: list[int]
    created_at: float
    sandbox_id: str | None = None  # a port of this sandbox, at a virtual address


@dataclass(frozen=True)
class ApiKeyRecord:
    """An API key as stored: never the key, only its SHA-256 (``key_hash``). ``scopes`` None
    means every scope; ``quotas`` maps a quota name (``service/access.py``) to its limit;
    ``rate_limit`` is requests per second (None: the workspace's default)."""

    id: str
    name: str
    key_hash: str
    role: str
    created_at: float
    scopes: tuple[str, ...] | None = None
    expires_at: float | None = None
    last_used_at: float | None = None
    revoked_at: float | None = None
    quotas: dict[str, float] = field(default_factory=dict)
    rate_limit: float | None = None
    created_by: str | None = None


@dataclass(frozen=True)
class TemplateRecord:
    """A template: ``name`` is ``NAME`` (the ``latest`` tag) or ``NAME:TAG``; ``image`` is an image
    of the store (``sha256:...``) or a prebuilt image's name (``base``). ``cpu``/``memory_mib``/
    ``disk_mib`` are the defaults, ``max_*`` the template's own ceilings (None: the workspace's)."""

    name: str
    image: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str]
    created_at: float
    source: str = ""
    workdir: str | None = None
    user: str | None = None
    start_cmd: list[str] | None = None
    max_cpu: float | None = None
    max_memory_mib: int | None = None
    max_disk_mib: int | None = None
    warmup: str | None = None
    warm: bool = False
    pool: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    warm_image: str | None = None
    owner: str | None = None
    shared: bool = True


@dataclass(frozen=True)
class TemplatePin:
    """The image (and exec defaults) a live sandbox was made from."""

    sandbox_id: str
    template: str
    image: str
    workdir: str | None = None
    user: str | None = None


@dataclass
class SnapshotRecord:
    """A saved sandbox state. ``kind`` is ``memory`` (processes included) or ``fs`` (files only);
    ``state`` is ``creating`` until the image is complete on disk, then ``ready``."""

    name: str
    state: str
    kind: str
    source_id: str
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str]
    image_path: str
    size_mib: int = 0
    created_at: float = 0.0
    image: str | None = None
    owner: str | None = None


@dataclass(frozen=True)
class TrustedKeyRecord:
    """A trusted signer of exports: ``public_key`` is ``ed25519:<base64 of the raw 32 bytes>``."""

    name: str
    public_key: str
    created_at: float


@dataclass(frozen=True)
class AuditEntry:
    """One audit log entry: who (key), what (action, method, path, target), the answer
    (status, result code), when and from where. ``id`` is 0 until stored."""

    at: float
    key_id: str | None
    key_name: str | None
    action: str
    method: str
    path: str
    target: str | None
    status: int
    result: str
    source: str | None = None
    detail: str | None = None
    id: int = 0


@dataclass(frozen=True)
class SandboxPortRecord:
    """A port of a sandbox opened to inbound traffic. ``nonce`` feeds the port's access token
    (an HMAC under the workspace's secret), so closing and reopening a port changes its token."""

    sandbox_id: str
    port: int
    public: bool
    nonce: str
    created_at: float


@dataclass(frozen=True)
class SecretRecord:
    """A brokered secret without its value: ``preset`` (``github``, ``openai``, ``anthropic``,
    ``http``, ``aws``), the host patterns it is bound to, the preset's ``options`` (header,
    scheme, query, body) and when it was stored, rotated and last injected. ``sealed`` is the
    encrypted value (``storage/sealing.py``), opened only by the broker."""

    name: str
    preset: str
    hosts: list[str]
    options: dict[str, object]
    sealed: str
    created_at: float
    updated_at: float
    last_used_at: float | None = None


@dataclass(frozen=True)
class SecretBindingRecord:
    """A secret given to a sandbox, and the placeholder the sandbox holds in its place."""

    sandbox_id: str
    secret: str
    placeholder: str
    created_at: float


@dataclass(frozen=True)
class SecretAuditRecord:
    """One injection of a secret into a request (never the value, never the query string)."""

    at: float
    sandbox_id: str
    secret: str
    host: str
    method: str
    path: str
