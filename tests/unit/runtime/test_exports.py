from __future__ import annotations

import corral.runtime as runtime


def test_public_names_are_exported() -> None:
    assert sorted(runtime.__all__) == sorted(
        [
            "AgentMount",
            "FakeRuntime",
            "GVisorRuntime",
            "InjectError",
            "Resources",
            "Runtime",
            "RuntimeFailure",
            "RuntimeInfo",
            "RuntimeStatus",
            "SandboxSpec",
            "build_agent_mount",
        ]
    )
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None


def test_implementations_satisfy_the_protocol() -> None:
    for cls in (runtime.FakeRuntime, runtime.GVisorRuntime):
        for method in ("start", "info", "list_ids", "destroy", "checkpoint", "restore", "pause"):
            assert callable(getattr(cls, method))
        assert isinstance(cls.name, str)
