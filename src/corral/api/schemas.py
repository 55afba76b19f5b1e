"""Request and response bodies of the HTTP API (the wire format; no table models here).

These models are the contract the SDK, the CLI and the OpenAPI document share. Field names are
stable; new fields may be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NetworkModeName = Literal["project_internet", "internet", "project", "airgapped"]
SandboxState = Literal["creating", "running", "parked", "stopped", "killed", "error"]


class ErrorBody(BaseModel):
    """Every error answer: a machine code and a message that says what to do."""

    code: str = Field(examples=["not_found"])
    message: str


class SecretFile(BaseModel):
    """A file written into a new sandbox holding a brokered secret's placeholder."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64, description="the secret (one of ``secrets``)")
    path: str = Field(max_length=4096, description="absolute path in the sandbox")
    template: str | None = Field(
        default=None,
        max_length=65536,
        description="the file's text with $NAME or ${NAME} for placeholders (default: the "
        "preset's template for that file, else the placeholder alone)",
    )


class SandboxCreate(BaseModel):
    """A request for a new sandbox; omitted resources take the template's defaults."""

    model_config = ConfigDict(extra="forbid")

    template: str = "base"
    cpu: float | None = Field(default=None, gt=0, description="vCPUs")
    memory_mib: int | None = Field(default=None, gt=0)
    disk_mib: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    ttl_seconds: int | None = Field(default=None, gt=0, description="end after this many seconds")
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        description="env values that are secret: never stored or shown; the sandbox becomes "
        "secret-bearing (no fork, export or memory snapshot)",
    )
    on_timeout: Literal["kill", "park"] = "kill"
    auto_park_idle: int | None = Field(
        default=None, gt=0, description="park after this many seconds without exec or file calls"
    )
    auto_wake: bool = Field(default=False, description="wake on an exec or file call when parked")
    snapshot: str | None = Field(default=None, description="restore from this snapshot")
    network: NetworkModeName | None = Field(
        default=None, description="egress mode (default: the workspace's first allowed mode)"
    )
    allow: list[str] = Field(default_factory=list, max_length=256, description="egress rules")
    deny: list[str] = Field(default_factory=list, max_length=256, description="egress rules")
    secrets: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="brokered secrets (docs/secrets.md): the sandbox's env holds placeholders, "
        "the broker puts the values into requests to the secrets' hosts",
    )
    secret_files: list[SecretFile] = Field(default_factory=list, max_length=32)


class NetworkPolicy(BaseModel):
    """A sandbox's egress policy (docs/network.md): a mode, allow and deny rules (deny wins)."""

    mode: NetworkModeName
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


class NetworkUpdate(BaseModel):
    """A live change: each field given replaces that part of the policy; omitted ones stay."""

    model_config = ConfigDict(extra="forbid")

    mode: NetworkModeName | None = None
    allow: list[str] | None = Field(default=None, max_length=256)
    deny: list[str] | None = Field(default=None, max_length=256)


class NetworkChanged(BaseModel):
    sandbox_id: str
    network: NetworkPolicy
    connections_cut: int = Field(description="open connections the new policy ended")


class ProjectService(BaseModel):
    """A name every sandbox in a project mode resolves, and the port it reaches there."""

    name: str
    address: str
    ports: list[int]
    created_at: float
    sandbox_id: str | None = Field(
        default=None, description="a port of this sandbox; `address` is then virtual"
    )


class ProjectServiceCreate(BaseModel):
    """Either ``target`` (an address the daemon reaches) or ``sandbox_id`` and ``port``."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(
        default=None, max_length=64, description="IPV4:PORT", examples=["10.1.2.3:5432"]
    )
    sandbox_id: str | None = Field(default=None, max_length=64)
    port: int | None = Field(default=None, ge=1, le=65535)


class ProjectServiceList(BaseModel):
    services: list[ProjectService]


class Sandbox(BaseModel):
    """A sandbox as the daemon records it."""

    id: str
    state: SandboxState
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    env: dict[str, str]
    metadata: dict[str, str]
    created_at: float
    expires_at: float | None
    error: str | None = None
    secret_env_keys: list[str] = Field(default_factory=list)
    brokered_secrets: list[str] = Field(
        default_factory=list,
        description="brokered secrets bound to it (in answers about one sandbox; not in lists)",
    )
    on_timeout: str = "kill"
    auto_park_idle: int | None = None
    auto_wake: bool = False
    parent_id: str | None = None
    owner: str | None = Field(
        default=None, description="the name of the key that made it (in listings and gets)"
    )
    image_mib: int = Field(default=0, description="disk taken by its parked memory image")
    pooled: bool = Field(default=False, description="waiting in its template's ready pool")
    frozen: bool = Field(
        default=False,
        description="running, but frozen for idleness: it costs no CPU, and the next call thaws "
        "it first (in answers about one sandbox; lists leave it false)",
    )
    network: NetworkPolicy | None = None
    # Filled in by GET /v1/sandboxes/{id} only (a list leaves them empty).
    ports: list[Port] = Field(default_factory=list, description="its open inbound ports")
    names: list[str] = Field(
        default_factory=list, description="the project services' names it resolves"
    )
    serves_as: list[str] = Field(
        default_factory=list, description="project services that are ports of this sandbox"
    )


class SandboxList(BaseModel):
    sandboxes: list[Sandbox]


class ExecRequest(BaseModel):
    """Run a command: ``cmd`` (argv) or ``shell`` (a /bin/sh -c string), exactly one."""

    model_config = ConfigDict(extra="forbid")

    cmd: list[str] | None = Field(default=None, min_length=1)
    shell: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    stdin: bool = Field(default=False, description="keep stdin open for later input")
    timeout: float | None = Field(
        default=None, gt=0, description="seconds; the process is killed after it"
    )
    background: bool = Field(default=False, description="return a pid at once instead of streaming")
    tag: str | None = None


class PtyRequest(BaseModel):
    """Start a command on a new pseudo-terminal; without ``cmd``, the user's login shell."""

    model_config = ConfigDict(extra="forbid")

    cmd: list[str] | None = Field(default=None, min_length=1)
    rows: int = Field(default=24, ge=1, le=4096)
    cols: int = Field(default=80, ge=1, le=4096)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    tag: str | None = None


class ResizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: int = Field(ge=1, le=4096)
    cols: int = Field(ge=1, le=4096)


class ProcessStarted(BaseModel):
    pid: int


class ProcessInfo(BaseModel):
    pid: int
    cmd: list[str]
    tag: str | None = None
    running: bool
    exit_code: int | None = None
    signal: int | None = None
    started_at: float
    ended_at: float | None = None
    pty: bool = Field(default=False, description="runs on a pseudo-terminal (POST /pty)")


class ProcessList(BaseModel):
    processes: list[ProcessInfo]


class SignalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signal: str | int = "SIGTERM"


class FileStat(BaseModel):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mode: int
    mtime: float
    target: str | None = None


class FileList(BaseModel):
    entries: list[FileStat]


class MkdirRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    parents: bool = True


class MkdirResult(BaseModel):
    created: bool


class MoveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str
    dst: str


class WriteResult(BaseModel):
    path: str
    size: int


class ResourceUsage(BaseModel):
    total: float
    reserved: float
    free: float


class Capacity(BaseModel):
    """Workspace capacity: cpu in vCPUs (after overcommit), memory and disk in MiB."""

    cpu: ResourceUsage
    memory: ResourceUsage
    disk: ResourceUsage
    cpu_overcommit: int


class Template(BaseModel):
    """A template: an image plus defaults and ceilings. ``name`` is NAME or NAME:TAG."""

    name: str
    image: str
    cpu: float
    memory_mib: int
    disk_mib: int
    created_at: float
    source: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    start_cmd: list[str] | None = None
    max_cpu: float | None = None
    max_memory_mib: int | None = None
    max_disk_mib: int | None = None
    warmup: str | None = None
    warm: bool = False
    pool: int = 0
    warm_ready: bool = Field(default=False, description="its warm memory image is made")
    pool_ready: int = Field(default=0, description="ready sandboxes waiting in its pool")
    labels: dict[str, str] = Field(default_factory=dict)
    layers: list[str] = Field(default_factory=list, description="image layers, bottom first")
    used_by: list[str] = Field(default_factory=list, description="live sandboxes made from it")
    shared: bool = Field(default=True, description="members may use it (else: its owner only)")


class BuildStep(BaseModel):
    """One build step: ``run`` (shell string or argv), ``copy`` ({src: [host paths], dst}),
    ``env``/``label`` ({K: V}), ``workdir``, ``user``, ``cmd``/``entrypoint`` (argv)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["run", "copy", "env", "workdir", "user", "label", "cmd", "entrypoint"]
    value: str | list[str] | dict[str, str] | dict[str, list[str] | str | bool]


class TemplateBuild(BaseModel):
    """Build a template. ``base`` is a template name, an uploaded image (``upload:ID``, with
    ``:TAG`` for an OCI layout), ``registry:HOST/NAME[:TAG]``, or ``docker-archive:PATH`` /
    ``oci:PATH[:TAG]`` for paths inside the daemon's import dir only. COPY sources are read from
    the uploaded ``context``. Answers an NDJSON stream of build events (docs/api.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(examples=["py", "dev:v2"])
    base: str | None = Field(default=None, description="default: the Dockerfile's FROM, or base")
    steps: list[BuildStep] = Field(default_factory=list)
    dockerfile: str | None = Field(default=None, description="Dockerfile text (its steps first)")
    context: str | None = Field(
        default=None, description="id of a context upload (POST /v1/templates/uploads)"
    )
    context_dir: str | None = Field(
        default=None, description="refused: the daemon reads no host path; upload the context"
    )
    build_args: dict[str, str] = Field(default_factory=dict)
    creds: str | None = Field(default=None, description="registry USER:PASS (never stored)")
    insecure: bool = Field(
        default=False, description="allow a plain-HTTP / unverified-TLS registry (loopback too)"
    )
    cpu: float | None = Field(default=None, gt=0)
    memory_mib: int | None = Field(default=None, gt=0)
    disk_mib: int | None = Field(default=None, gt=0)
    max_cpu: float | None = Field(default=None, gt=0)
    max_memory_mib: int | None = Field(default=None, gt=0)
    max_disk_mib: int | None = Field(default=None, gt=0)
    start_cmd: list[str] | None = None
    warmup: str | None = None
    warm: bool = False
    pool: int = Field(default=0, ge=0)
    tags: list[str] = Field(default_factory=list, description="more names for the result")
    step_timeout: float | None = Field(
        default=None, gt=0, description="seconds a step may take (default: the daemon's)"
    )
    build_disk_mib: int | None = Field(
        default=None, gt=0, description="disk of the build sandbox (default: the daemon's)"
    )
    network: NetworkModeName | None = Field(
        default=None, description="what RUN steps reach (default: internet)"
    )
    recipes: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="recipes (GET /v1/recipes) whose steps and defaults come first",
    )
    shared: bool | None = Field(
        default=None,
        description="members may use it (default: yes for an admin's build, no for a member's; "
        "only admins may share)",
    )


class Upload(BaseModel):
    """A received upload, to be named by one build (``context`` or ``base: upload:ID``)."""

    id: str
    kind: Literal["context", "docker-archive", "oci"]
    size: int = Field(description="bytes received")
    members: int = Field(description="archive members unpacked (0 for docker-archive)")


class TemplateList(BaseModel):
    templates: list[Template]


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(default=1, ge=1, le=64)


class SnapshotCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    fs_only: bool = Field(default=False, description="files only, no memory or processes")
    allow_secrets: bool = Field(
        default=False, description="allow a files-only snapshot of a secret-bearing sandbox"
    )


class Snapshot(BaseModel):
    name: str
    kind: Literal["memory", "fs"]
    source_id: str
    template: str
    cpu: float
    memory_mib: int
    disk_mib: int
    size_mib: int
    created_at: float


class SnapshotList(BaseModel):
    snapshots: list[Snapshot]


class ImportSigner(BaseModel):
    """Who signed an imported export: a trusted key's name, or none (an ``fs_only`` import of
    an untrusted export)."""

    name: str | None = None
    public_key: str | None = None


class ImportResult(BaseModel):
    kind: Literal["sandbox", "snapshot"]
    sandbox: Sandbox | None = None
    snapshot: Snapshot | None = None
    signer: ImportSigner | None = None


class TrustedKey(BaseModel):
    name: str
    public_key: str = Field(description="ed25519:<base64 of the raw 32-byte key>")
    created_at: float


class TrustedKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)
    public_key: str = Field(
        max_length=4096,
        description="ed25519:<base64>, as `corral trust show` prints it, or a PEM public key",
    )


class TrustList(BaseModel):
    public_key: str = Field(description="this workspace's own key (always trusted)")
    keys: list[TrustedKey]


class WorkspaceKey(BaseModel):
    public_key: str = Field(description="this workspace's key: give it to `corral trust add`")


# -- code interpreter ---------------------------------------------------------------------------
class CodeExecution(BaseModel):
    """``POST /v1/sandboxes/{id}/code/execute``: E2B's execution request, plus ``timeout``."""

    model_config = ConfigDict(extra="ignore")  # E2B's SDKs add fields; the known ones matter

    code: str = Field(max_length=8 * 1024 * 1024)
    language: str | None = Field(default=None, max_length=64, examples=["python", "bash"])
    context_id: str | None = Field(default=None, max_length=128)
    env_vars: dict[str, str] | None = None
    timeout: float | None = Field(
        default=None, gt=0, le=86400, description="seconds; the code is interrupted after them"
    )


class CodeContextCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    language: str | None = Field(default=None, max_length=64)
    cwd: str | None = Field(default=None, max_length=4096)


class CodeContext(BaseModel):
    id: str
    language: str
    cwd: str


class CodeContextList(BaseModel):
    contexts: list[CodeContext]


class Recipe(BaseModel):
    name: str
    description: str
    steps: list[str]
    start_cmd: list[str] | None = None
    warmup: str | None = None
    warm: bool = False
    memory_mib: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    digest: str = Field(description="changes whenever what the recipe builds changes")


class RecipeList(BaseModel):
    recipes: list[Recipe]


class PortOpen(BaseModel):
    """Open a sandbox's port to inbound HTTP and WebSocket traffic through the daemon."""

    model_config = ConfigDict(extra="forbid")

    port: int = Field(ge=1, le=65535)
    public: bool = Field(default=False, description="reachable without the access token")


class Port(BaseModel):
    """An open port: ``url`` reaches it (the host-name route when the daemon has a domain for
    them, else the path route); ``token`` is needed unless ``public``."""

    sandbox_id: str
    port: int
    public: bool
    url: str
    path_url: str
    host_url: str | None
    token: str | None
    created_at: float


class PortList(BaseModel):
    ports: list[Port]


Sandbox.model_rebuild()  # it refers to Port, defined after it


class SecretSet(BaseModel):
    """Store (or replace) a brokered secret. ``value`` is never returned or logged."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=8192, repr=False)
    preset: str = Field(default="http", description="github, openai, anthropic, http or aws")
    hosts: list[str] | None = Field(
        default=None, max_length=32, description="hosts it is bound to (default: the preset's)"
    )
    header: str | None = Field(default=None, description="only this header carries it")
    scheme: str | None = Field(default=None, description="with header: e.g. Bearer")
    query: bool | None = Field(default=None, description="replace it in query strings")
    body: bool | None = Field(default=None, description="replace it in request bodies")


class SecretRotate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=8192, repr=False)


class Secret(BaseModel):
    """A brokered secret, never its value."""

    name: str
    preset: str
    hosts: list[str]
    header: str | None = None
    scheme: str | None = None
    query: bool = True
    body: bool = False
    created_at: float
    updated_at: float
    last_used_at: float | None = None
    sandboxes: list[str] = Field(default_factory=list, description="sandboxes bound to it")


class SecretList(BaseModel):
    secrets: list[Secret]


class SecretAuditEntry(BaseModel):
    """One injection: who used which secret where (never the value or the query string)."""

    at: float
    sandbox_id: str
    secret: str
    host: str
    method: str
    path: str


class SecretLog(BaseModel):
    entries: list[SecretAuditEntry]


class ConsoleLoginToken(BaseModel):
    token: str = Field(description="good for one login, until expires_at")
    path: str = Field(description="the console's login link, relative to the daemon's URL")
    expires_at: float = Field(description="Unix time")
    key_name: str = Field(description="the key (and so the role) the console will act as")


class SandboxMetricsSample(BaseModel):
    sandbox_id: str
    timestamp: float = Field(description="Unix time of the sample")
    cpu_count: float
    cpu_used_pct: float = Field(description="percent of its cpu allowance since the last sample")
    mem_used: int = Field(description="bytes")
    mem_total: int = Field(description="bytes")
    mem_cache: int = Field(description="bytes of file cache")
    disk_used: int = Field(description="bytes")
    disk_total: int = Field(description="bytes")
    net_rx_bytes: int = Field(0, description="bytes received since creation (over park/wake)")
    net_rx_packets: int = Field(0, description="packets received since creation")
    net_tx_bytes: int = Field(0, description="bytes sent since creation (over park/wake)")
    net_tx_packets: int = Field(0, description="packets sent since creation")
