"""Images: read-only root filesystems that templates are made from.

An image lives at ``<images_dir>/<name>/rootfs`` and is complete only when
``<images_dir>/<name>/image.json`` exists; builds happen in a temporary sibling directory and are
renamed into place, so a failed or interrupted build leaves no half image.
"""

from corral.images.store import ImageBuildError, ImageStore, debian_mirror

__all__ = ["ImageBuildError", "ImageStore", "debian_mirror"]
