"""Templates on the wire: the template, its build request and steps, uploads, recipes.

Part of the HTTP API's contract (``corral.api.schemas``): field names are stable; new fields may
be added, none removed or renamed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.api.schemas.base import NetworkModeName

__all__ = [
    "BuildStep",
    "Recipe",
    "RecipeList",
    "Template",
    "TemplateBuild",
    "TemplateList",
    "Upload",
]


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
