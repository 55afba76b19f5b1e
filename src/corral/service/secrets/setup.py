"""What a new sandbox gets for its brokered secrets: placeholders in its env, secret files that
hold placeholders, and the broker's CA in its trust store (never a value).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.errors import InvalidRequest
from corral.service.secret_presets import PRESETS
from corral.service.secrets.values import new_placeholder
from corral.storage import Database, SecretRecord

__all__ = [
    "CA_FILE",
    "MAX_FILES",
    "SYSTEM_BUNDLE",
    "TRUST_ENV",
    "BrokeredSetup",
    "install",
    "prepare",
]

MAX_FILES = 32
# Where the workspace CA goes in a sandbox, and the env that points runtimes at it.
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CA_FILE = "/etc/corral/broker-ca.pem"
TRUST_ENV = {
    "SSL_CERT_FILE": SYSTEM_BUNDLE,
    "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE,
    "CURL_CA_BUNDLE": SYSTEM_BUNDLE,
    "NODE_EXTRA_CA_CERTS": CA_FILE,
}


@dataclass
class BrokeredSetup:
    """What a new sandbox gets for its brokered secrets: env (placeholders and the trust env),
    files (path -> text) and the bindings to store (placeholder per secret)."""

    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)


def prepare(
    db: Database, names: list[str], files: dict[str, tuple[str, str | None]]
) -> BrokeredSetup:
    """Placeholders, env and files for a new sandbox given ``names`` and ``files`` (path ->
    (secret name, template or None)); checks that each exists. A template is text with
    ``$NAME``/``${NAME}`` for the placeholders; None: the preset's template for that kind of
    file, else the bare placeholder and a newline."""
    setup = BrokeredSetup()
    if not names and not files:
        return setup
    problems = []
    records: dict[str, SecretRecord] = {}
    for name in dict.fromkeys(names):
        found = db.secrets.get(name)
        if found is None:
            problems.append(f"secret {name!r} not found")
        else:
            records[name] = found
    if sum(1 for r in records.values() if r.preset == "aws") > 1:
        problems.append("at most one aws secret per sandbox (they share AWS_ACCESS_KEY_ID)")
    reserved = sorted(set(records) & set(TRUST_ENV))
    if reserved:
        problems.append(f"{', '.join(reserved)}: the broker's trust settings use that env name")
    if len(files) > MAX_FILES:
        problems.append(f"at most {MAX_FILES} secret files")
    for path, (name, _) in files.items():
        if not path.startswith("/") or "\0" in path or len(path) > 4096:
            problems.append(f"secret file path {path!r} is not absolute")
        if name not in records:
            problems.append(f"secret file {path!r} names {name!r}, which is not given")
    if problems:
        raise InvalidRequest("invalid secrets: " + "; ".join(problems))
    for name, record in records.items():
        placeholder = new_placeholder()
        setup.placeholders[name] = placeholder
        if record.preset == "aws":
            setup.env["AWS_ACCESS_KEY_ID"] = placeholder
            setup.env["AWS_SECRET_ACCESS_KEY"] = new_placeholder()
        else:
            setup.env[name] = placeholder
    values = {name: setup.placeholders[name] for name in records}
    for path, (name, template) in files.items():
        if not template:
            preset_text = PRESETS[records[name].preset].file_template(path)
            template = (preset_text or "${NAME}\n").replace("${NAME}", "${" + name + "}")
        try:
            setup.files[path] = string.Template(template).substitute(values)
        except (KeyError, ValueError) as exc:
            raise InvalidRequest(
                f"secret file {path!r}: its template names {exc} which is not a given "
                "secret ($NAME or ${NAME} of a --secret)"
            ) from None
    setup.env.update(TRUST_ENV)
    return setup


async def install(client: AgentClient, pem: bytes, files: dict[str, str]) -> None:
    """(A booted sandbox's agent.) Put the broker's CA ``pem`` in the sandbox's trust store -- the
    system bundle (made if the image has none) and ``CA_FILE`` for runtimes that take one
    extra file -- then write its secret files (placeholders only)."""
    bundle = b""
    try:
        chunks = [chunk async for chunk in client.read_file(SYSTEM_BUNDLE)]
        bundle = b"".join(chunks)
    except AgentError as exc:
        if exc.code != "not_found":
            raise
    if pem not in bundle:
        if bundle and not bundle.endswith(b"\n"):
            bundle += b"\n"
        await client.write_file(SYSTEM_BUNDLE, bundle + pem, mode=0o644, parents=True)
    await client.write_file(CA_FILE, pem, mode=0o644, parents=True)
    for path, text in files.items():
        await client.write_file(path, text.encode(), mode=0o644, parents=True)
