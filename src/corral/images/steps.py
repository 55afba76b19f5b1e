"""Build steps and the Dockerfile subset that produces them (pure: no I/O but the text given).

Supported instructions: FROM (once, first), RUN, COPY, ADD (local files only), ENV, WORKDIR,
USER, ARG, LABEL, CMD and ENTRYPOINT (recorded as the template's start command). Any other
instruction, a second FROM, ``FROM ... AS``, flags such as ``COPY --from`` and ADD of URLs are
refused with a ``DockerfileError`` that names the line and the instruction.

``$VAR``/``${VAR}`` are substituted from ARG and ENV values in every instruction but RUN, CMD
and ENTRYPOINT (there the shell expands them; ARG values are in the RUN step's environment).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

__all__ = ["SUPPORTED", "BuildStep", "DockerfileError", "ParsedDockerfile", "parse_dockerfile"]

SUPPORTED = (
    "FROM",
    "RUN",
    "COPY",
    "ADD",
    "ENV",
    "WORKDIR",
    "USER",
    "ARG",
    "LABEL",
    "CMD",
    "ENTRYPOINT",
)
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class DockerfileError(ValueError):
    """A Dockerfile uses something outside the supported subset, or is malformed."""


@dataclass(frozen=True)
class BuildStep:
    """One step of a build, in order.

    kind    value
    run     a shell string (``/bin/sh -c``) or an argv list (exec form)
    copy    ``{"src": [paths], "dst": path, "extract": bool}``; sources are host paths, relative
            ones to the build context (``extract``: ADD of a local tar archive)
    env     ``{"K": "V"}``
    workdir an absolute path (relative ones are taken from the current workdir)
    user    a name or uid[:gid]
    label   ``{"K": "V"}``
    cmd / entrypoint   an argv list
    """

    kind: str
    value: object
    text: str = ""
    line: int | None = None
    build_env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return self.text or f"{self.kind.upper()} {self.value}"


@dataclass(frozen=True)
class ParsedDockerfile:
    base: str
    steps: list[BuildStep]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; drop comments and blank lines. Yields (first line number, text)."""
    out: list[tuple[int, str]] = []
    buffer = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as docker does
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        out.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        out.append((start, buffer.strip()))
    return out


def _substitute(value: str, variables: dict[str, str]) -> str:
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), value)


def _pairs(rest: str, line: int, instruction: str) -> dict[str, str]:
    """``K=V K2="v 2"`` or the legacy ``K V`` form of ENV and LABEL."""
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise DockerfileError(f"Dockerfile line {line}: {instruction}: {exc}") from exc
    if not words:
        raise DockerfileError(f"Dockerfile line {line}: {instruction} needs KEY=VALUE")
    if "=" not in words[0]:
        key, _, value = rest.strip().partition(" ")
        return {key: value.strip()}
    pairs: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise DockerfileError(
                f"Dockerfile line {line}: {instruction}: {word!r} is not KEY=VALUE"
            )
        pairs[key] = value
    return pairs


def _json_or_shell(rest: str) -> list[str] | str:
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except ValueError:
            return rest
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return rest


def parse_dockerfile(text: str, build_args: dict[str, str] | None = None) -> ParsedDockerfile:
    """Parse ``text`` into its base (the FROM source) and its steps."""
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    given = dict(build_args or {})
    base: str | None = None
    steps: list[BuildStep] = []
    for line, content in _logical_lines(text):
        instruction, _, rest = content.partition(" ")
        upper = instruction.upper()
        rest = rest.strip()
        where = f"Dockerfile line {line}"
        if upper not in SUPPORTED:
            raise DockerfileError(
                f"{where}: {upper} is not supported (supported: {', '.join(SUPPORTED)})"
            )
        if upper != "ARG" and upper != "FROM" and base is None:
            raise DockerfileError(f"{where}: {upper} before FROM")
        variables = {**args, **env}
        if upper == "ARG":
            name, sep, default = rest.partition("=")
            if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise DockerfileError(f"{where}: ARG needs NAME[=DEFAULT]")
            args[name] = given.get(
                name, _substitute(default.strip().strip('"'), variables) if sep else ""
            )
            continue
        if upper == "FROM":
            if base is not None:
                raise DockerfileError(
                    f"{where}: a second FROM (multi-stage builds) is not supported"
                )
            words = rest.split()
            if len(words) != 1:
                raise DockerfileError(
                    f"{where}: FROM takes one image (FROM ... AS and --platform are not supported)"
                )
            base = _substitute(words[0], variables)
            continue
        if rest.startswith("--"):
            flag = rest.split()[0]
            raise DockerfileError(f"{where}: {upper} {flag} is not supported")
        if not rest:
            raise DockerfileError(f"{where}: {upper} needs an argument")
        step_text = f"{upper} {rest}"
        if upper == "RUN":
            steps.append(BuildStep("run", _json_or_shell(rest), step_text, line, dict(args)))
        elif upper in ("CMD", "ENTRYPOINT"):
            value = _json_or_shell(rest)
            argv = value if isinstance(value, list) else ["/bin/sh", "-c", value]
            steps.append(BuildStep(upper.lower(), argv, step_text, line))
        elif upper in ("COPY", "ADD"):
            value = _json_or_shell(rest)
            try:
                words = value if isinstance(value, list) else shlex.split(rest)
            except ValueError as exc:
                raise DockerfileError(f"{where}: {upper}: {exc}") from exc
            words = [_substitute(w, variables) for w in words]
            if len(words) < 2:
                raise DockerfileError(f"{where}: {upper} needs SRC... DST")
            if upper == "ADD" and any(re.match(r"^[a-z][a-z0-9+.-]*://", w) for w in words[:-1]):
                raise DockerfileError(f"{where}: ADD of a URL is not supported (local files only)")
            steps.append(
                BuildStep(
                    "copy",
                    {"src": words[:-1], "dst": words[-1], "extract": upper == "ADD"},
                    step_text,
                    line,
                )
            )
        elif upper in ("ENV", "LABEL"):
            pairs = {k: _substitute(v, variables) for k, v in _pairs(rest, line, upper).items()}
            if upper == "ENV":
                env.update(pairs)
            steps.append(BuildStep(upper.lower(), pairs, step_text, line))
        elif upper == "WORKDIR":
            steps.append(BuildStep("workdir", _substitute(rest, variables), step_text, line))
        elif upper == "USER":
            steps.append(BuildStep("user", _substitute(rest, variables), step_text, line))
    if base is None:
        raise DockerfileError("Dockerfile has no FROM")
    return ParsedDockerfile(base=base, steps=steps)
