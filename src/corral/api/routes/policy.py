"""The workspace policy: read it (every key), change it (admins; audited like every change)."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api import schemas_access as schemas
from corral.api.deps import PolicyDep
from corral.service.policy import WorkspacePolicy

router = APIRouter(prefix="/v1/policy", tags=["policy"])


def policy_schema(policy: WorkspacePolicy) -> schemas.Policy:
    return schemas.Policy.model_validate(policy.to_json())


@router.get("", operation_id="get_policy", response_model=schemas.Policy)
async def get_policy(policy: PolicyDep) -> schemas.Policy:
    return policy_schema(policy.current())


@router.patch("", operation_id="set_policy", response_model=schemas.Policy)
async def set_policy(body: schemas.PolicyUpdate, policy: PolicyDep) -> schemas.Policy:
    """Change the fields given (null: back to the default); applies to the next request."""
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    return policy_schema(policy.update(changes))
