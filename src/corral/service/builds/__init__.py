"""Template builds: the plan, the build sandbox, the builder that runs steps and commits a layer,
COPY from the uploaded context, and the build's event log."""

from corral.service.builds.builder import TemplateBuilder
from corral.service.builds.log import BuildHandle
from corral.service.builds.plan import BuildFailed, BuildPlan

__all__ = ["BuildFailed", "BuildHandle", "BuildPlan", "TemplateBuilder"]
