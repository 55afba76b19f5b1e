"""Templates: named images plus default resources. This version knows images built into the
image store (the default ``base``); building templates from other sources comes later."""

from __future__ import annotations

import time
from pathlib import Path

from corral.config import Settings
from corral.images import ImageStore
from corral.service.errors import NotFound
from corral.storage import Database, TemplateRecord


class TemplateService:
    """Keeps the template table in step with the image store."""

    def __init__(self, db: Database, images: ImageStore, settings: Settings) -> None:
        self._db = db
        self._images = images
        self._settings = settings

    def sync(self) -> None:
        """Register every complete image as a template of the same name if none exists yet."""
        for name in self._images.names():
            if self._db.templates.get(name) is None:
                self._db.templates.put(
                    TemplateRecord(
                        name=name,
                        image=name,
                        cpu=self._settings.default_cpu,
                        memory_mib=self._settings.default_memory_mib,
                        disk_mib=self._settings.default_disk_mib,
                        env={},
                        created_at=time.time(),
                    )
                )

    def list(self) -> list[TemplateRecord]:
        return self._db.templates.list()

    def get(self, name: str) -> TemplateRecord:
        record = self._db.templates.get(name)
        if record is None:
            known = ", ".join(t.name for t in self._db.templates.list()) or "none"
            raise NotFound(f"template {name!r} not found (known templates: {known})")
        return record

    def rootfs(self, template: TemplateRecord) -> Path:
        rootfs = self._images.rootfs(template.image)
        if rootfs is None:
            raise NotFound(
                f"image {template.image!r} of template {template.name!r} is missing from "
                f"{self._images.images_dir}; run ./scripts/setup to build it"
            )
        return rootfs
