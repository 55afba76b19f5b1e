"""Templates as a user builds and uses them: every image source, build steps, tags, ceilings,
removal, and each way a build fails (which must name the cause and leave no template behind).
Local paths (Dockerfile dirs, --copy sources, image archives) reach the daemon only as uploads;
builds are admitted against capacity, disk-limited, timed per step and keep a capped log.

The images are made offline by the test (``images.py``); the registry is Debian's
``docker-registry`` started on a free loopback port with its own storage dir and stopped by pid.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import CORRAL, Daemon, free_port
from .images import write_docker_archive, write_oci_layout

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("images")
    return {
        "archive": write_docker_archive(root / "busybox.tar"),
        "oci": write_oci_layout(root / "oci", tag="v1"),
        "root": root,
    }


def start_registry(root: Path, auth: tuple[str, str] | None = None) -> Iterator[str]:
    """Run docker-registry on a free loopback port (with htpasswd auth when given)."""
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is not installed (scripts/setup installs it)")
    port = free_port()
    config = root / "config.yml"
    text = (
        "version: 0.1\n"
        "log:\n  level: error\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    if auth is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt

        hashed = crypt.crypt(auth[1], crypt.mksalt(crypt.METHOD_BLOWFISH))
        (root / "htpasswd").write_text(f"{auth[0]}:{hashed}\n")
        text += f"auth:\n  htpasswd:\n    realm: test\n    path: {root / 'htpasswd'}\n"
    config.write_text(text)
    with open(root / "registry.log", "wb") as log:
        process = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError(
                "docker-registry did not listen: " + (root / "registry.log").read_text()
            )
        yield f"127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from start_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from start_registry(tmp_path_factory.mktemp("registry-auth"), ("corral", "s3cret"))


def push(images: dict[str, Path], target: str, *creds: str) -> None:
    pushed = subprocess.run(
        [
            *("skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false"),
            *creds,
            f"oci:{images['oci']}:v1",
            f"docker://{target}",
        ],
        capture_output=True,
    )
    assert pushed.returncode == 0, pushed.stderr.decode()


def create(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[bytes]:
    return daemon.cli("template", "create", *args, timeout=300)


def create_in(daemon: Daemon, cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`corral template create` run from `cwd` (relative paths are the client's own)."""
    return subprocess.run(
        [CORRAL, "template", "create", *args],
        capture_output=True,
        env=daemon.env,
        cwd=cwd,
        timeout=300,
    )


def new(daemon: Daemon, *args: str) -> str:
    made = daemon.cli("new", "--json", *args)
    assert made.returncode == 0, made.stderr.decode()
    return str(json.loads(made.stdout)["id"])


def run(daemon: Daemon, sandbox: str, *cmd: str) -> subprocess.CompletedProcess[bytes]:
    return daemon.cli("exec", sandbox, "--", *cmd)


def template_names(daemon: Daemon) -> list[str]:
    listed = daemon.cli("template", "ls", "--json")
    assert listed.returncode == 0, listed.stderr.decode()
    return [t["name"] for t in json.loads(listed.stdout)]


def remove(daemon: Daemon, *names: str) -> None:
    for name in names:
        daemon.cli("template", "rm", name)


def test_busybox_docker_archive_runs_the_agent_without_python(
    daemon: Daemon, images: dict[str, Path]
) -> None:
    made = create(daemon, "bbox", "--from", f"docker-archive:{images['archive']}")
    assert made.returncode == 0, made.stderr.decode()
    assert b"unpacking" in made.stdout and b"built bbox" in made.stdout
    sandbox = new(daemon, "--template", "bbox")
    try:
        out = run(daemon, sandbox, "sh", "-c", "echo hello $IMAGE_VAR; ls /bin/busybox")
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout == b"hello busybox\n/bin/busybox\n"
        no_python = run(daemon, sandbox, "python3", "-c", "pass")
        assert no_python.returncode != 0
        assert b"python3" in no_python.stderr
        listed = json.loads(daemon.cli("ls", "--json").stdout)
        assert {s["id"]: s["template"] for s in listed}[sandbox] == "bbox"
        refused = daemon.cli("template", "rm", "bbox")
        assert refused.returncode == 1 and sandbox.encode() in refused.stderr
    finally:
        daemon.cli("kill", sandbox)
    assert daemon.cli("template", "rm", "bbox").returncode == 0
    assert "bbox" not in template_names(daemon)


def test_oci_layout_child_template_shares_layers_and_tags(
    daemon: Daemon, images: dict[str, Path]
) -> None:
    assert create(daemon, "boci:v1", "--from", f"oci:{images['oci']}:v1").returncode == 0
    child = create(
        daemon,
        "bdev:v2",
        "--from",
        "boci:v1",
        "--tag",
        "latest",
        "--env",
        "A=1",
        "--workdir",
        "/work",
        "--run",
        "echo built > made.txt; rm /bin/cat",
        "--user",
        "nobody",
    )
    try:
        assert child.returncode == 0, child.stderr.decode()
        assert b"RUN steps run with network mode internet" in child.stdout
        parent = json.loads(daemon.cli("template", "info", "boci:v1", "--json").stdout)
        info = json.loads(daemon.cli("template", "info", "bdev", "--json").stdout)
        assert info["layers"][: len(parent["layers"])] == parent["layers"]
        assert len(info["layers"]) == len(parent["layers"]) + 1
        assert (
            info["image"]
            == json.loads(daemon.cli("template", "info", "bdev:v2", "--json").stdout)["image"]
        )
        assert {"boci:v1", "bdev", "bdev:v2"} <= set(template_names(daemon))
        sandbox = new(daemon, "--template", "bdev:latest")
        try:
            out = run(daemon, sandbox, "sh", "-c", "pwd; id -u; echo $A; ls made.txt; ls /bin/cat")
            assert out.stdout.decode().split("\n")[:4] == ["/work", "65534", "1", "made.txt"]
            assert out.returncode != 0  # /bin/cat was removed by the build
        finally:
            daemon.cli("kill", sandbox)
        assert daemon.cli("template", "rm", "bdev:v2").returncode == 0
        assert "bdev" in template_names(daemon) and "bdev:v2" not in template_names(daemon)
    finally:
        remove(daemon, "bdev", "bdev:v2", "boci:v1")


def test_template_ceilings_refuse_bigger_sandboxes(daemon: Daemon, images: dict[str, Path]) -> None:
    made = create(
        daemon,
        "bsmall",
        "--from",
        f"docker-archive:{images['archive']}",
        "--memory",
        "128",
        "--max-memory",
        "256",
        "--max-cpu",
        "1",
    )
    try:
        assert made.returncode == 0, made.stderr.decode()
        refused = daemon.cli("new", "--template", "bsmall", "--memory", "512", "--cpu", "2")
        assert refused.returncode == 1
        message = refused.stderr.decode()
        assert "memory 512 MiB is over the template's ceiling of 256 MiB by 256 MiB" in message
        assert "cpu 2 is over the template's ceiling of 1 vCPUs" in message
        sandbox = new(daemon, "--template", "bsmall")
        info = json.loads(daemon.cli("info", sandbox, "--json").stdout)
        daemon.cli("kill", sandbox)
        assert info["memory_mib"] == 128
    finally:
        remove(daemon, "bsmall")


def test_dockerfile_build_copies_files_and_records_the_start_command(
    daemon: Daemon, images: dict[str, Path]
) -> None:
    context = images["root"] / "ctx"
    (context / "src").mkdir(parents=True)
    (context / "src" / "hello.txt").write_text("hello from the context\n")
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(
        "ARG GREETING=hi\n"
        "FROM base\n"
        "ENV APP=/app\n"
        "WORKDIR $APP\n"
        "COPY src/ ./src/\n"
        "RUN cat src/hello.txt > copy.txt && echo $GREETING >> copy.txt\n"
        'CMD ["sleep", "300"]\n'
    )
    made = create(daemon, "dfile", "--dockerfile", str(dockerfile))
    try:
        assert made.returncode == 0, made.stderr.decode()
        info = json.loads(daemon.cli("template", "info", "dfile", "--json").stdout)
        assert info["start_cmd"] == ["sleep", "300"] and info["workdir"] == "/app"
        sandbox = new(daemon, "--template", "dfile")
        try:
            out = run(daemon, sandbox, "cat", "copy.txt")
            assert out.stdout == b"hello from the context\nhi\n", out.stderr
            # The start command runs in every new sandbox, in the background.
            out = run(daemon, sandbox, "ps", "-o", "args=", "-C", "sleep")
            assert out.stdout.strip() == b"sleep 300", out.stderr
        finally:
            daemon.cli("kill", sandbox)
    finally:
        remove(daemon, "dfile")


def test_setuid_files_keep_their_bits_inside_the_sandbox_from_a_nosuid_view(
    daemon: Daemon, images: dict[str, Path]
) -> None:
    # The host mounts image views nosuid,nodev; what setuid does inside is gVisor's business
    # (measured: this runsc does not raise the euid on exec, with or without the host flag).
    made = create(
        daemon,
        "bsuid",
        "--from",
        "base",
        "--run",
        "cp /usr/bin/id /usr/local/bin/suid-id && chmod 4755 /usr/local/bin/suid-id",
    )
    try:
        assert made.returncode == 0, made.stderr.decode()
        sandbox = new(daemon, "--template", "bsuid")  # mounts the image's view
        try:
            view = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
            store = str((daemon.data_dir / "store" / "mnt").resolve())
            flags = [row[5] for row in view if row[4].startswith(store)]
            assert flags and all({"nosuid", "nodev"} <= set(f.split(",")) for f in flags), flags
            as_nobody = ("exec", sandbox, "--user", "nobody", "--")
            mode = daemon.cli(*as_nobody, "stat", "-c", "%a %u", "/usr/local/bin/suid-id")
            assert mode.stdout == b"4755 0\n", mode.stderr.decode()
            ran = daemon.cli(*as_nobody, "/usr/local/bin/suid-id", "-ru")
            assert ran.returncode == 0 and ran.stdout == b"65534\n", ran.stderr.decode()
        finally:
            daemon.cli("kill", sandbox)
    finally:
        remove(daemon, "bsuid")


def test_registry_pull_anonymous(daemon: Daemon, images: dict[str, Path], registry: str) -> None:
    push(images, f"{registry}/corral/busybox:v1")
    # TLS is skipped only when asked, loopback registries included.
    plain = create(daemon, "breg", "--from", f"registry:{registry}/corral/busybox:v1")
    assert plain.returncode == 1 and b"fetching registry:" in plain.stderr
    assert "breg" not in template_names(daemon)
    made = create(daemon, "breg", "--from", f"registry:{registry}/corral/busybox:v1", "--insecure")
    try:
        assert made.returncode == 0, made.stderr.decode()
        sandbox = new(daemon, "--template", "breg")
        try:
            assert run(daemon, sandbox, "echo", "pulled").stdout == b"pulled\n"
        finally:
            daemon.cli("kill", sandbox)
        missing = create(
            daemon, "bmiss", "--from", f"registry:{registry}/corral/nothing:v9", "--insecure"
        )
        assert missing.returncode == 1
        assert b"registry:" in missing.stderr and b"nothing" in missing.stderr
        assert "bmiss" not in template_names(daemon)
    finally:
        remove(daemon, "breg")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--run", "echo step one; echo oops >&2; exit 3"], b"step 1/1 (RUN echo step one"),
        (
            ["--from", "registry:127.0.0.1:{closed}/x/y:z", "--insecure"],
            b"fetching registry:127.0.0.1:",
        ),
        (["--from", "docker-archive:{bad}"], b"fetching docker-archive:"),
        (["--from", "nosuchtemplate"], b"template 'nosuchtemplate' not found"),
        (["--dockerfile", "{dockerfile}"], b"Dockerfile line 2: EXPOSE is not supported"),
        (
            ["--run", "sleep 120", "--step-timeout", "2"],
            b"step 1/1 (RUN sleep 120) took longer than the step timeout of 2 s",
        ),
        (
            ["--build-disk", "64", "--run", "dd if=/dev/zero of=/big bs=1M count=200"],
            b"No space left on device",
        ),
        (["--from", "docker-archive:/nonexistent/x.tar"], b"reads no host path for a build"),
    ],
    ids=[
        "failing-run",
        "unreachable-registry",
        "bad-archive",
        "missing-template",
        "dockerfile",
        "step-timeout",
        "build-disk-full",
        "host-path",
    ],
)
def test_failed_builds_name_the_cause_and_leave_nothing(
    daemon: Daemon, images: dict[str, Path], args: list[str], expected: bytes
) -> None:
    bad = images["root"] / "bad.tar"
    bad.write_bytes(b"this is not a tar archive")
    dockerfile = images["root"] / "Dockerfile.bad"
    dockerfile.write_text("FROM base\nEXPOSE 80\n")
    given = [a.format(closed=free_port(), bad=bad, dockerfile=dockerfile) for a in args]
    failed = create(daemon, "broken", *given)
    assert failed.returncode == 1
    assert expected in failed.stderr, failed.stderr.decode()
    assert "broken" not in template_names(daemon)
    if "exit 3" in args[-1]:
        assert b"exit code 3" in failed.stderr
        assert b"oops" in failed.stderr  # the step's own stderr was streamed
        logs = daemon.cli("template", "logs", "broken")
        assert b"step one" in logs.stdout and b"exit code 3" in logs.stdout
    leftovers = list((daemon.data_dir / "store" / "tmp").iterdir())
    assert leftovers == []


def test_registry_pull_with_credentials(
    daemon: Daemon, images: dict[str, Path], private_registry: str
) -> None:
    image = f"{private_registry}/corral/busybox:v1"
    push(images, image, "--dest-creds=corral:s3cret")
    refused = create(daemon, "bpriv", "--from", f"registry:{image}", "--insecure")
    assert refused.returncode == 1 and b"fetching registry:" in refused.stderr
    made = create(
        daemon, "bpriv", "--from", f"registry:{image}", "--creds", "corral:s3cret", "--insecure"
    )
    try:
        assert made.returncode == 0, made.stderr.decode()
        info = daemon.cli("template", "info", "bpriv", "--json").stdout
        logs = daemon.cli("template", "logs", "bpriv").stdout
        assert b"s3cret" not in info and b"s3cret" not in logs and b"s3cret" not in made.stdout
    finally:
        remove(daemon, "bpriv")


def test_sdk_template_builder(daemon: Daemon, images: dict[str, Path]) -> None:
    from corral import BuildError, Client, Sandbox, Template

    local = images["root"] / "sdk-files"
    (local / "conf").mkdir(parents=True)
    (local / "conf" / "app.ini").write_text("[app]\n")
    (local / "note.txt").write_text("a note\n")
    with Client(daemon.url, daemon.key) as client:
        spec = (
            Template()
            .from_image(f"docker-archive:{images['archive']}")
            .set_envs({"GREETING": "hey"})
            .set_workdir("/srv")
            .copy(local / "conf", "/srv/conf")
            .copy(local / "note.txt", "/srv/")
            .run_cmd("echo $GREETING > greeting; cat conf/app.ini note.txt >> greeting")
        )
        seen: list[str] = []
        info = Template.build(spec, "bsdk", client=client, on_log=lambda e: seen.append(e.type))
        try:
            assert info.name == "bsdk" and info.workdir == "/srv"
            assert seen[0] == "start" and seen[-1] == "done" and "output" in seen
            assert "bsdk" in [t.name for t in client.templates()]
            with Sandbox.create(template="bsdk", url=daemon.url, api_key=daemon.key) as sbx:
                assert sbx.exec(["cat", "greeting"]).stdout == "hey\n[app]\na note\n"
            with pytest.raises(BuildError) as failed:
                Template.build(
                    Template().from_image("bsdk").run_cmd("exit 7"), "bsdk2", client=client
                )
            assert failed.value.step == 1 and failed.value.exit_code == 7
        finally:
            remove(daemon, "bsdk")


def test_cli_uploads_dockerfile_dir_copies_and_archive_from_another_cwd(
    daemon: Daemon, images: dict[str, Path]
) -> None:
    root = images["root"] / "client"
    project = root / "proj"
    (project / "app").mkdir(parents=True)
    (project / "app" / "main.sh").write_text("echo from main\n")
    (project / "debug.log").write_text("left out by .dockerignore\n")
    (project / ".dockerignore").write_text("*.log\n")
    (project / "Dockerfile").write_text(
        "FROM base\nWORKDIR /app\nCOPY app/ ./\nCOPY . /ctx/\nRUN sh main.sh > out.txt\n"
    )
    (root / "extra.txt").write_text("an extra file\n")
    shutil.copy(images["archive"], root / "busybox.tar")
    elsewhere = images["root"] / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    made = create_in(
        daemon,
        elsewhere,
        "dctx",
        "--dockerfile",
        "../client/proj/Dockerfile",
        "--copy",
        "../client/extra.txt:/opt/extra.txt",
    )
    archived = create_in(daemon, root, "darch", "--from", "docker-archive:./busybox.tar")
    try:
        assert made.returncode == 0, made.stderr.decode()
        sandbox = new(daemon, "--template", "dctx")
        try:
            out = run(daemon, sandbox, "sh", "-c", "cat out.txt /opt/extra.txt; ls -a /ctx")
            assert out.returncode == 0, out.stderr.decode()
            lines = out.stdout.decode().splitlines()
            assert lines[:2] == ["from main", "an extra file"]
            assert "Dockerfile" in lines and "app" in lines and "debug.log" not in lines
            assert ".corral-copy" not in lines  # where the CLI put --copy sources
        finally:
            daemon.cli("kill", sandbox)
        assert archived.returncode == 0, archived.stderr.decode()
        info = json.loads(daemon.cli("template", "info", "darch", "--json").stdout)
        assert info["source"] == "docker-archive:busybox.tar (uploaded)"
        sandbox = new(daemon, "--template", "darch")
        try:
            assert run(daemon, sandbox, "ls", "/bin/busybox").stdout == b"/bin/busybox\n"
        finally:
            daemon.cli("kill", sandbox)
        uploads = daemon.data_dir / "uploads"
        assert list(uploads.iterdir()) == []  # each build removed the uploads it took
    finally:
        remove(daemon, "dctx", "darch")


def test_build_over_capacity_is_refused_and_releases_its_reservation(daemon: Daemon) -> None:
    # The daemon is shared: other tests' sandboxes may hold memory. Fill what is free now
    # (sandboxes of at most the 8192 MiB ceiling) so less than a build sandbox's 1024 MiB is left.
    with daemon.client() as client:
        before = client.get("/v1/capacity").json()["memory"]
    fill = int(before["free"]) - 512
    sizes = [8192] * (fill // 8192) + ([fill % 8192] if fill % 8192 >= 128 else [])
    fillers: list[str] = []
    try:
        for size in sizes:
            fillers.append(new(daemon, "--memory", str(size)))
        refused = create(daemon, "bfull", "--run", "true")
        assert refused.returncode == 1
        message = refused.stderr.decode()
        assert "the build sandbox of template 'bfull' does not fit" in message, message
        assert "not enough free memory in the workspace: asked for 1024 MiB" in message
        assert "bfull" not in template_names(daemon)
    finally:
        for sandbox in fillers:
            daemon.cli("kill", sandbox)
    made = create(daemon, "bfull", "--run", "true")
    try:
        assert made.returncode == 0, made.stderr.decode()
        with daemon.client() as client:
            after = client.get("/v1/capacity").json()["memory"]
        assert after["reserved"] == before["reserved"], (before, after)  # the build's hold is gone
    finally:
        remove(daemon, "bfull")


def test_a_build_flooding_its_log_keeps_a_capped_log(daemon: Daemon) -> None:
    flood = "head -c 6000000 /dev/zero | tr '\\0' x; echo; echo flood-done"
    made = create(daemon, "bflood", "--run", flood, "--quiet")
    try:
        assert made.returncode == 0, made.stderr.decode()
        log_file = daemon.data_dir / "build-logs" / "bflood.ndjson"
        assert log_file.stat().st_size < 3 * 1024 * 1024  # the cap is 2 MiB of output
        logs = daemon.cli("template", "logs", "bflood")
        assert logs.returncode == 0, logs.stderr.decode()
        text = logs.stdout.decode()
        assert "over the log cap of 2097152 bytes; further output is dropped" in text
        dropped = [line for line in text.splitlines() if "[corral: dropped" in line]
        assert len(dropped) == 1 and "past the log cap of 2097152 bytes" in dropped[0]
        assert int(dropped[0].split()[2]) >= 6000000 - 2097152
        assert "built bflood" in text
    finally:
        remove(daemon, "bflood")
