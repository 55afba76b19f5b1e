"""Template builds: the request and plan, the build service (validation, admission, commit,
warm-up), the builder that runs steps in a build sandbox and commits a layer, COPY from the
uploaded context, and the build's event log."""

from corral.service.builds.builder import TemplateBuilder
from corral.service.builds.log import BuildHandle
from corral.service.builds.plan import BuildFailed, BuildPlan, BuildRequest
from corral.service.builds.service import BuildService

__all__ = [
    "BuildFailed",
    "BuildHandle",
    "BuildPlan",
    "BuildRequest",
    "BuildService",
    "TemplateBuilder",
]
