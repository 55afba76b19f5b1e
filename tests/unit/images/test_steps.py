"""The Dockerfile subset: what it accepts, and the line it names when it refuses."""

from __future__ import annotations

import pytest

from corral.images.steps import DockerfileError, parse_dockerfile


def test_supported_instructions_become_steps_in_order() -> None:
    parsed = parse_dockerfile(
        """
        # a comment
        ARG VERSION=1.2
        FROM base
        ENV APP=/app \\
            MODE=dev
        WORKDIR $APP
        COPY src/ ${APP}/src/
        ADD vendor.tar /opt/
        RUN echo $VERSION && \\
            touch /done
        RUN ["/bin/true", "x"]
        USER nobody
        LABEL team="core" tier=1
        CMD ["python3", "-m", "http.server"]
        """
    )
    assert parsed.base == "base"
    kinds = [s.kind for s in parsed.steps]
    assert kinds == ["env", "workdir", "copy", "copy", "run", "run", "user", "label", "cmd"]
    env, workdir, copy, add, run, run_exec, user, label, cmd = parsed.steps
    assert env.value == {"APP": "/app", "MODE": "dev"}
    assert workdir.value == "/app"
    assert copy.value == {"src": ["src/"], "dst": "/app/src/", "extract": False}
    assert add.value["extract"] is True  # type: ignore[index]
    assert run.value == "echo $VERSION &&  touch /done"
    assert run.build_env == {"VERSION": "1.2"}
    assert run_exec.value == ["/bin/true", "x"]
    assert user.value == "nobody"
    assert label.value == {"team": "core", "tier": "1"}
    assert cmd.value == ["python3", "-m", "http.server"]
    assert run.line == 10


def test_build_args_override_defaults_and_shell_form_cmd_runs_in_sh() -> None:
    parsed = parse_dockerfile("ARG B=x\nFROM tpl-$B\nCMD serve --port 1", {"B": "y"})
    assert parsed.base == "tpl-y"
    assert parsed.steps[0].value == ["/bin/sh", "-c", "serve --port 1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM base\nEXPOSE 80", "Dockerfile line 2: EXPOSE is not supported"),
        ("FROM base\n\nHEALTHCHECK CMD true", "Dockerfile line 3: HEALTHCHECK is not supported"),
        ("FROM a\nFROM b", "Dockerfile line 2: a second FROM"),
        ("FROM a AS build", "Dockerfile line 1: FROM takes one image"),
        ("FROM a\nCOPY --from=x /a /b", "Dockerfile line 2: COPY --from=x is not supported"),
        ("FROM a\nADD https://x/y.tgz /y", "Dockerfile line 2: ADD of a URL is not supported"),
        ("RUN true", "Dockerfile line 1: RUN before FROM"),
        ("# nothing", "Dockerfile has no FROM"),
    ],
)
def test_refusals_name_the_line_and_instruction(text: str, message: str) -> None:
    with pytest.raises(DockerfileError) as caught:
        parse_dockerfile(text)
    assert message in str(caught.value)
