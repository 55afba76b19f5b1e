"""The API names a sandbox's states as the service's model does: the OpenAPI enum is a
``Literal`` (so the document lists the names inline), checked here against ``SandboxState``."""

from __future__ import annotations

from typing import get_args

from corral.api import schemas
from corral.service.model import SandboxState


def test_the_api_names_every_state_of_the_model_and_no_other() -> None:
    assert get_args(schemas.SandboxState) == tuple(SandboxState)
