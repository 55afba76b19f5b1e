"""Recipes: the named build steps a template build can start with (``recipes`` in its body)."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api import schemas
from corral.service.templates.recipes import list_recipes

router = APIRouter(prefix="/v1/recipes", tags=["templates"])


@router.get("", operation_id="list_recipes", response_model=schemas.RecipeList)
async def get_recipes() -> schemas.RecipeList:
    return schemas.RecipeList(recipes=[schemas.Recipe(**r.to_dict()) for r in list_recipes()])
