"""Liveness, without authentication."""

from fastapi import APIRouter

router = APIRouter()


@router.get("/healthz", operation_id="health", tags=["health"])
async def health() -> dict[str, bool]:
    return {"ok": True}
