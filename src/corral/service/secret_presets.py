"""Connector presets of brokered secrets: the hosts, headers and env a kind of secret needs.

- ``github``: github.com, api.github.com, uploads.github.com; any header (``Bearer``, ``token``,
  and git's Basic auth) and the query; env ``NAME``; ``--secret-file NAME:.../gh/hosts.yml``
  gets gh's format, ``NAME:.../.git-credentials`` git's credential store.
- ``openai``: api.openai.com; ``Authorization: Bearer``; env ``NAME``.
- ``anthropic``: api.anthropic.com; ``x-api-key``; env ``NAME``.
- ``http``: the hosts given (required); ``header`` (any when not given) with ``scheme``, the
  query, and the body with ``body``; env ``NAME``.
- ``aws``: ``*.amazonaws.com``; re-signed (SigV4) with the real keys; env ``AWS_ACCESS_KEY_ID``
  and ``AWS_SECRET_ACCESS_KEY`` (both placeholders). The value is ``KEY_ID:SECRET_KEY``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from corral.service.errors import InvalidRequest

__all__ = ["PRESETS", "Preset", "SecretOptions", "resolve_options"]


@dataclass(frozen=True)
class Preset:
    name: str
    hosts: tuple[str, ...]
    header: str | None = None
    scheme: str | None = None
    query: bool = True
    body: bool = False
    needs_hosts: bool = False
    # File templates for ``--secret-file``, by the ending of the file's path (``${NAME}``: the
    # placeholder).
    file_templates: tuple[tuple[str, str], ...] = ()

    def file_template(self, path: str) -> str | None:
        return next((text for suffix, text in self.file_templates if path.endswith(suffix)), None)


PRESETS: dict[str, Preset] = {
    "github": Preset(
        "github",
        ("github.com", "api.github.com", "uploads.github.com"),
        file_templates=(
            ("gh/hosts.yml", "github.com:\n    oauth_token: ${NAME}\n    git_protocol: https\n"),
            # git's credential store (`git config --global credential.helper store`)
            (".git-credentials", "https://x-access-token:${NAME}@github.com\n"),
        ),
    ),
    "openai": Preset("openai", ("api.openai.com",), header="authorization", scheme="Bearer"),
    "anthropic": Preset("anthropic", ("api.anthropic.com",), header="x-api-key", query=False),
    "http": Preset("http", (), needs_hosts=True),
    "aws": Preset("aws", ("*.amazonaws.com",), query=False),
}

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_SCHEME = re.compile(r"^[A-Za-z0-9._~+/-]{1,32}$")
_HOST = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
)
MAX_HOSTS = 32


@dataclass(frozen=True)
class SecretOptions:
    """Where a secret may be injected: resolved from its preset and the caller's overrides."""

    preset: str
    hosts: tuple[str, ...]
    header: str | None
    scheme: str | None
    query: bool
    body: bool

    def to_json(self) -> dict[str, object]:
        return {
            "header": self.header,
            "scheme": self.scheme,
            "query": self.query,
            "body": self.body,
        }


def resolve_options(
    preset: str,
    hosts: list[str] | None,
    *,
    header: str | None = None,
    scheme: str | None = None,
    query: bool | None = None,
    body: bool | None = None,
) -> SecretOptions:
    """The preset's defaults with the given overrides, every one checked."""
    found = PRESETS.get(preset)
    if found is None:
        raise InvalidRequest(f"unknown secret preset {preset!r}: use one of {', '.join(PRESETS)}")
    problems = []
    chosen = [h.strip().lower().rstrip(".") for h in hosts] if hosts else list(found.hosts)
    if found.needs_hosts and not chosen:
        problems.append(f"preset {preset!r} needs the hosts the secret is for (--host NAME)")
    if len(chosen) > MAX_HOSTS:
        problems.append(f"a secret is bound to at most {MAX_HOSTS} hosts")
    for host in chosen:
        if len(host) > 253 or not _HOST.match(host):
            problems.append(f"host {host!r} is not a host name or *.domain")
    header = header.strip().lower() if header else found.header
    if header is not None and not _HEADER.match(header):
        problems.append(f"header {header!r} is not an HTTP header name")
    scheme = scheme.strip() if scheme else found.scheme
    if scheme is not None and not _SCHEME.match(scheme):
        problems.append(f"scheme {scheme!r} is not an authorization scheme (e.g. Bearer)")
    if scheme is not None and header is None:
        problems.append("a scheme needs a header (--header)")
    if preset == "aws" and body:
        problems.append("aws secrets are re-signed, never put in a body")
    if problems:
        raise InvalidRequest("invalid secret: " + "; ".join(problems))
    return SecretOptions(
        preset=preset,
        hosts=tuple(dict.fromkeys(chosen)),
        header=header,
        scheme=scheme,
        query=found.query if query is None else query,
        body=found.body if body is None else body,
    )
