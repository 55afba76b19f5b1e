"""Templates: named images with defaults and ceilings, the sandboxes' pins to them, image GC,
and the uploads builds read (``uploads``). Builds themselves are ``service/builds/``."""

from corral.service.templates.service import TemplateService, canonical_name, check_name

__all__ = ["TemplateService", "canonical_name", "check_name"]
