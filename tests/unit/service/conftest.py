"""The ``fakes`` fixture (the service on FakeRuntime, FakeNetwork and fake agents) for every
service test; see ``fakes.py``."""

from tests.unit.service.fakes import fakes

__all__ = ["fakes"]
