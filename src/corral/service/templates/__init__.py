"""Templates: named images with defaults and ceilings, the sandboxes' pins to them, image GC,
and the uploads builds read (``uploads``)."""

from corral.service.templates.service import BuildRequest, TemplateService, canonical_name

__all__ = ["BuildRequest", "TemplateService", "canonical_name"]
