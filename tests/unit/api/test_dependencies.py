"""Every route and dependency of the app runs on the event loop, none in a worker thread.

FastAPI runs a plain ``def`` endpoint or dependency in anyio's thread pool: a thread round trip
per call on every request (the exec path had five). ``api/deps.py`` keeps them ``async def``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts

from corral.api.app import create_app
from corral.service.workspace import Workspace
from tests.unit.conftest import Harness


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def test_no_route_or_dependency_runs_in_a_thread(harness: Harness) -> None:
    app = create_app(harness.workspace, manage_lifespan=False)
    # Each route as the app serves it: with the dependencies its router was included with.
    routes = [r for r in iter_route_contexts(app.routes) if hasattr(r, "dependant")]
    assert len(routes) > 100
    threaded = {
        f"{route.path} {getattr(call, '__qualname__', call)}"
        for route in routes
        for call in _calls(route.dependant)
        if not inspect.iscoroutinefunction(call)
    }
    assert not threaded, f"sync endpoints or dependencies (run in a thread): {sorted(threaded)}"


def test_routes_take_services_not_the_workspace(harness: Harness) -> None:
    """A route names the services it calls (``SandboxesDep``, ``LifecycleDep``, ...): no
    dependency hands it the whole ``Workspace``."""
    app = create_app(harness.workspace, manage_lifespan=False)
    routes = [r for r in iter_route_contexts(app.routes) if hasattr(r, "dependant")]
    whole = {
        f"{route.path} {getattr(call, '__qualname__', call)}"
        for route in routes
        for call in _calls(route.dependant)
        if inspect.signature(call, eval_str=True).return_annotation is Workspace
    }
    assert not whole, f"routes given the whole workspace: {sorted(whole)}"
