"""The web console in a real browser (Debian's Chromium, headless, driven by Playwright) against
a real daemon: log in with `corral console`'s link, read the workspace, create, park, wake and
kill from the table, use the terminal (type, Ctrl-C, reload and reattach), upload, view and
download a file, change the network mode, build a template and watch its log.

Screenshots of each page go to a temporary directory (printed; not kept in the repository).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from corral.console.static import BUILT
from tests.e2e.conftest import Daemon
from tests.e2e.test_pty import WAIT_FOREGROUND_SLEEP
from tests.e2e.workloads import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As root, on a machine with no network but loopback: no sandbox, no background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000
expect.set_options(timeout=TIMEOUT_MS)  # a loaded 2-core machine parks and builds slowly


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = Path(os.environ.get("CORRAL_CONSOLE_SHOTS") or tmp_path_factory.mktemp("console"))
    where.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots in {where}")
    return where


@pytest.fixture(scope="module")
def page(daemon: Daemon) -> Iterator[Page]:
    if not (BUILT / "index.html").is_file():
        raise RuntimeError(f"the console is not built in {BUILT}: run ./scripts/setup")
    if not Path(CHROMIUM).exists():
        raise RuntimeError("Debian's chromium is not installed: run ./scripts/setup")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(
            viewport={"width": 1440, "height": 900}, accept_downloads=True
        )
        context.set_default_timeout(TIMEOUT_MS)
        tab = context.new_page()
        try:
            tab.goto(login_link(daemon))
            expect(tab.get_by_role("heading", name="Workspace")).to_be_visible()
            yield tab
        finally:
            context.close()
            browser.close()


def terminal_text(page: Page) -> str:
    return page.locator(".xterm-rows").inner_text()


def wait_terminal(page: Page, pattern: str) -> None:
    expect(page.locator(".xterm-rows")).to_contain_text(re.compile(pattern), timeout=TIMEOUT_MS)


def type_line(page: Page, line: str) -> None:
    page.locator(".xterm").click()
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def login_link(daemon: Daemon) -> str:
    link = daemon.cli("console").stdout.decode().strip()
    assert re.fullmatch(re.escape(daemon.url) + r"/console/#login=[\w-]+", link), link
    return link


def test_log_in_with_the_link_and_see_the_workspace(
    daemon: Daemon, page: Page, shots: Path
) -> None:
    link = login_link(daemon)
    browser = page.context.browser
    assert browser is not None
    fresh = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        tab = fresh.new_page()
        tab.goto(link)
        expect(tab.get_by_role("heading", name="Workspace")).to_be_visible()
        expect(tab.get_by_role("region", name="CPU")).to_contain_text("vCPU")
        expect(tab.get_by_role("region", name="Memory")).to_contain_text("MiB")
        expect(tab.locator("nav")).to_contain_text("admin")
        assert "#login=" not in tab.url  # the token left the address bar
        tab.screenshot(path=shots / "workspace.png", full_page=True)
    finally:
        fresh.close()

    # The same link a second time: refused, and the page says why.
    other = browser.new_context()
    try:
        again = other.new_page()
        again.goto(link)
        expect(again.get_by_role("alert")).to_contain_text("already used or has expired")
        again.screenshot(path=shots / "login-reused.png")
    finally:
        other.close()


def test_create_park_wake_from_the_table(daemon: Daemon, page: Page, shots: Path) -> None:
    page.goto(f"{daemon.url}/console/#/sandboxes")
    form = page.get_by_role("form", name="New sandbox")
    form.get_by_label("Memory MiB").fill("256")
    form.get_by_role("button", name="New sandbox").click()
    row = page.locator("table.sandboxes tbody tr[data-id]").first
    expect(row.get_by_test_id("state")).to_have_text("running")
    sandbox_id = row.get_attribute("data-id")
    page.screenshot(path=shots / "sandboxes.png", full_page=True)

    row.get_by_role("button", name="Park").click()
    expect(row.get_by_test_id("state")).to_have_text("parked")
    with daemon.client() as api:
        assert api.get(f"/v1/sandboxes/{sandbox_id}").json()["state"] == "parked"
    row.get_by_role("button", name="Wake").click()
    expect(row.get_by_test_id("state")).to_have_text("running")

    # The workspace page counts it, and its recent events show the changes.
    page.get_by_role("link", name="Workspace").click()
    expect(page.get_by_test_id("count-running")).not_to_have_text("0")
    expect(page.locator("table.events")).to_contain_text("parked")


def test_terminal_types_interrupts_and_reattaches_after_a_reload(
    daemon: Daemon, page: Page, shots: Path
) -> None:
    page.goto(f"{daemon.url}/console/#/sandboxes")
    row = page.locator("table.sandboxes tbody tr[data-id]").first
    row.get_by_role("link").click()
    expect(page.get_by_test_id("terminal-status")).to_contain_text("opened terminal")
    type_line(page, "echo $((6*7)) in-console")
    wait_terminal(page, r"42 in-console")
    type_line(page, "sleep 100; echo after-sleep")
    # Ctrl-C once the sleep holds the terminal (earlier, it would reach the shell instead).
    sandbox_id = page.url.rsplit("/", 1)[-1].split("?")[0]
    with daemon.client() as api:
        waited = api.post(
            f"/v1/sandboxes/{sandbox_id}/exec",
            json={"cmd": ["python3", "-c", WAIT_FOREGROUND_SLEEP]},
            timeout=60,
        )
        assert '"exit_code":0' in waited.text, waited.text
    page.keyboard.press("Control+C")
    type_line(page, "")  # gVisor leaves the ^C in the input line: end it
    type_line(page, "printf '\\033[31mred-%s\\033[0m\\n' done; echo prompt-back")
    wait_terminal(page, r"red-done")
    assert terminal_text(page).count("after-sleep") == 1  # the typed line only: interrupted
    # Colours reach the screen as colours (xterm.js styles the cell), not as escape codes.
    red = page.locator(".xterm-rows span", has_text="red-done").last
    assert "xterm-fg-1" in (red.get_attribute("class") or "")
    page.screenshot(path=shots / "terminal.png", full_page=True)

    wait_terminal(page, r"prompt-back\s*root@")  # the shell waits for input again

    page.reload()
    expect(page.get_by_test_id("terminal-status")).to_contain_text("reattached to terminal")
    wait_terminal(page, r"42 in-console")  # the screen came back
    wait_terminal(page, r"prompt-back\s*root@")
    type_line(page, "echo again-$((2+3))")
    wait_terminal(page, r"again-5")


def test_files_upload_view_and_download(
    daemon: Daemon, page: Page, shots: Path, tmp_path: Path
) -> None:
    page.goto(f"{daemon.url}/console/#/sandboxes")
    page.locator("table.sandboxes tbody tr[data-id]").first.get_by_role("link").click()
    page.get_by_role("tab", name="files").click()
    page.get_by_label("Directory", exact=True).fill("/tmp")
    page.get_by_role("button", name="Open", exact=True).click()
    upload = tmp_path / "from-browser.txt"
    upload.write_text("hello from the console\n")
    into_tmp = page.get_by_label("Upload to /tmp")  # labelled once /tmp is listed
    expect(into_tmp).to_be_attached()
    into_tmp.set_input_files(upload)
    entry = page.locator("tr", has_text="from-browser.txt")
    expect(entry).to_be_visible()
    with daemon.client() as api:
        sandbox_id = page.url.rsplit("/", 1)[-1].split("?")[0]
        read = api.get(
            f"/v1/sandboxes/{sandbox_id}/files/content", params={"path": "/tmp/from-browser.txt"}
        )
        assert read.text == "hello from the console\n"
    entry.get_by_role("button", name="View").click()
    expect(page.get_by_test_id("file-view")).to_have_text("hello from the console\n")
    with page.expect_download() as download:
        entry.get_by_role("link", name="Download").click()
    assert Path(download.value.path()).read_text() == "hello from the console\n"
    page.screenshot(path=shots / "files.png", full_page=True)


def test_metrics_plot_the_sandbox_live(daemon: Daemon, page: Page, shots: Path) -> None:
    page.goto(f"{daemon.url}/console/#/sandboxes")
    page.locator("table.sandboxes tbody tr[data-id]").first.get_by_role("link").click()
    page.get_by_role("tab", name="metrics").click()
    expect(page.get_by_test_id("metrics-now")).to_contain_text(
        re.compile(r"memory\s+\d+ of 256 MiB")
    )
    # cpu, memory, disk and network (in and out, from the counters since creation)
    expect(page.locator(".plot canvas")).to_have_count(4)
    expect(page.locator(".plot").filter(has_text="Network")).to_be_visible()
    expect(page.get_by_test_id("network-totals")).to_contain_text(
        re.compile(r"in \d+(\.\d)? (B|KiB|MiB) \(\d+ packets\), out")
    )
    page.screenshot(path=shots / "metrics.png", full_page=True)


def test_network_mode_changes_live(daemon: Daemon, page: Page, shots: Path) -> None:
    page.goto(f"{daemon.url}/console/#/sandboxes")
    row = page.locator("table.sandboxes tbody tr[data-id]").first
    sandbox_id = row.get_attribute("data-id")
    row.get_by_role("link").click()
    page.get_by_role("tab", name="network").click()
    form = page.get_by_role("form", name="Network")
    form.get_by_label("Mode").select_option("project")
    form.get_by_role("button", name="Apply live").click()
    expect(form.get_by_role("status")).to_contain_text("Applied: project")
    with daemon.client() as api:
        assert api.get(f"/v1/sandboxes/{sandbox_id}").json()["network"]["mode"] == "project"
    page.screenshot(path=shots / "network.png", full_page=True)


def test_build_a_template_and_watch_its_log(daemon: Daemon, page: Page, shots: Path) -> None:
    page.goto(f"{daemon.url}/console/#/templates")
    form = page.get_by_role("form", name="Build a template")
    form.get_by_label("Name").fill("from-console")
    form.get_by_label("Run steps").fill("echo built-by-the-console")
    form.get_by_role("button", name="Build").click()
    expect(page.get_by_test_id("build-log")).to_contain_text("built-by-the-console")
    expect(page.locator("main [role=status]")).to_contain_text("Built from-console")
    expect(page.locator("table")).to_contain_text("from-console")
    page.screenshot(path=shots / "templates.png", full_page=True)


def test_kill_asks_first(daemon: Daemon, page: Page, shots: Path) -> None:
    page.set_viewport_size({"width": 1024, "height": 768})  # a laptop
    page.goto(f"{daemon.url}/console/#/sandboxes")
    row = page.locator("table.sandboxes tbody tr[data-id]").first
    sandbox_id = row.get_attribute("data-id")
    page.screenshot(path=shots / "sandboxes-laptop.png", full_page=True)
    expect(row.get_by_role("button", name="Kill")).to_be_in_viewport()
    row.get_by_role("button", name="Kill").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Kill {sandbox_id}?")
    page.screenshot(path=shots / "kill-confirm.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(row.get_by_test_id("state")).to_have_text("running")
    row.get_by_role("button", name="Kill").click()
    page.get_by_role("dialog").get_by_role("button", name="Kill").click()
    expect(page.locator(f'tr[data-id="{sandbox_id}"]')).to_have_count(0)
    with daemon.client() as api:
        assert api.get(f"/v1/sandboxes/{sandbox_id}").json()["state"] == "killed"
    page.set_viewport_size({"width": 800, "height": 700})  # a narrow window: the menu on top
    page.goto(f"{daemon.url}/console/#/")
    page.screenshot(path=shots / "workspace-narrow.png", full_page=True)


def log_in_with_key(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/console/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Workspace")).to_be_visible()


def test_keys_policy_audit_and_what_member_and_viewer_keys_see(
    daemon: Daemon, page: Page, shots: Path
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    with daemon.client() as api:
        made = api.post("/v1/sandboxes", json={"memory_mib": 256})
        assert made.status_code == 201, made.text
        admins = made.json()["id"]

    # An admin makes a viewer key on the keys page; the key is shown once.
    page.goto(f"{daemon.url}/console/#/keys")
    form = page.get_by_role("form", name="New key")
    form.get_by_label("Name").fill("watcher")
    form.get_by_label("Role").select_option("viewer")
    form.get_by_role("button", name="Create key").click()
    viewer_key = page.get_by_test_id("new-key").inner_text().strip()
    expect(page.locator("table")).to_contain_text("watcher")
    page.screenshot(path=shots / "keys.png", full_page=True)
    page.goto(f"{daemon.url}/console/#/policy")
    expect(page.get_by_label("Max vCPU per sandbox")).to_be_visible()
    page.screenshot(path=shots / "policy.png", full_page=True)
    page.goto(f"{daemon.url}/console/#/audit")
    expect(page.locator("table")).to_contain_text("create_key")
    page.screenshot(path=shots / "audit.png", full_page=True)

    with daemon.client() as api:
        member_key = api.post("/v1/keys", json={"name": "alice", "role": "member"}).json()["key"]
    browser = page.context.browser
    assert browser is not None
    for key, role in ((member_key, "member"), (viewer_key, "viewer")):
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        try:
            other = context.new_page()
            other.set_default_timeout(TIMEOUT_MS)
            log_in_with_key(other, daemon.url, key)
            nav = other.get_by_role("navigation")
            expect(nav).to_contain_text(role)
            expect(nav.get_by_role("link", name="Keys")).to_have_count(0)
            expect(nav.get_by_role("link", name="Audit log")).to_have_count(0)
            other.goto(f"{daemon.url}/console/#/policy")  # readable, not changeable
            expect(other.get_by_label("Max vCPU per sandbox")).to_be_disabled()
            expect(other.get_by_role("button", name="Save policy")).to_have_count(0)
            other.goto(f"{daemon.url}/console/#/sandboxes")
            expect(other.get_by_text("shown")).to_be_visible()
            if role == "member":
                # Another key's sandbox is not there at all (by URL: answered as missing).
                expect(other.locator(f'tr[data-id="{admins}"]')).to_have_count(0)
                form = other.get_by_role("form", name="New sandbox")
                form.get_by_label("Memory MiB").fill("256")
                form.get_by_role("button", name="New sandbox").click()
                row = other.locator("table.sandboxes tbody tr[data-id]").first
                expect(row.get_by_test_id("state")).to_have_text("running")
                expect(row).to_contain_text("alice")
                other.screenshot(path=shots / f"sandboxes-{role}.png", full_page=True)
                other.goto(f"{daemon.url}/console/#/sandboxes/{admins}")
                expect(other.get_by_role("alert")).to_contain_text("not found")
            else:
                # A viewer reads everything and changes nothing.
                expect(other.get_by_role("form", name="New sandbox")).to_have_count(0)
                row = other.locator(f'tr[data-id="{admins}"]')
                expect(row.get_by_test_id("state")).to_have_text("running")
                expect(row.get_by_role("button")).to_have_count(0)
                other.screenshot(path=shots / f"sandboxes-{role}.png", full_page=True)
                row.get_by_role("link").click()
                expect(other.get_by_text("A viewer key may not open a terminal")).to_be_visible()
        finally:
            context.close()


def test_sandbox_page_fork_snapshot_ports_processes_and_a_refusal(
    daemon: Daemon, page: Page, shots: Path
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{daemon.url}/console/#/sandboxes")
    # A request the daemon refuses: its message is shown as it is.
    form = page.get_by_role("form", name="New sandbox")
    form.get_by_label("Memory MiB").fill("9999999")
    form.get_by_role("button", name="New sandbox").click()
    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"Refused \(4\d\d\).*memory"))
    page.screenshot(path=shots / "refused.png")

    with daemon.client() as api:
        sandbox_id = api.post("/v1/sandboxes", json={"memory_mib": 256}).json()["id"]
        started = api.post(
            f"/v1/sandboxes/{sandbox_id}/exec",
            json={"cmd": ["sleep", "300"], "background": True},
        )
        pid = started.json()["pid"]
    page.goto(f"{daemon.url}/console/#/sandboxes/{sandbox_id}?tab=processes")
    row = page.locator("tr", has_text="sleep 300")
    row.get_by_label(f"Signal for {pid}").select_option("SIGKILL")
    row.get_by_role("button", name="Signal").click()
    page.get_by_role("dialog").get_by_role("button", name="Send SIGKILL").click()
    expect(row).to_contain_text("killed by 9")

    page.get_by_role("tab", name="ports").click()
    page.get_by_label("Port").fill("8080")
    page.get_by_role("button", name="Open port").click()
    link = page.locator("table a", has_text="8080").first
    expect(link).to_be_visible()
    assert (link.get_attribute("href") or "").startswith("http")
    page.screenshot(path=shots / "ports.png", full_page=True)

    page.get_by_role("button", name="Fork").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("spinbutton").fill("2")
    dialog.get_by_role("button", name="Fork").click()
    page.get_by_role("button", name="Snapshot").click()
    dialog.get_by_role("textbox").fill("from-console")
    dialog.get_by_role("button", name="Snapshot").click()
    page.get_by_role("tab", name="lineage").click()
    lineage = page.get_by_role("tabpanel")
    expect(lineage.locator("li a")).to_have_count(2)  # the two forks
    expect(lineage).to_contain_text("from-console")
    page.screenshot(path=shots / "lineage.png", full_page=True)
    page.get_by_role("link", name="Snapshots").click()
    expect(page.locator("table")).to_contain_text("from-console")
    page.screenshot(path=shots / "snapshots.png", full_page=True)


STEALER = """<!doctype html><title>waiting</title><script>
fetch("/console/api/session")
  .then((r) => (r.ok ? r.json() : Promise.reject(new Error("status " + r.status))))
  .then((s) => (document.title = "stolen:" + s.csrf), (e) => (document.title = "blocked:" + e));
</script>"""


def test_a_sandbox_page_on_a_path_route_cannot_use_the_console_session(
    daemon: Daemon, page: Page, shots: Path
) -> None:
    """The attack: a sandbox serves a page whose script calls the console's API; a user logged
    in to the console opens it by the port's path URL, on the daemon's own origin. The page
    runs, but in an origin of its own: the call carries no session and its answer is unreadable."""
    with daemon.client() as api:
        sandbox_id = api.post("/v1/sandboxes", json={"memory_mib": 256}).json()["id"]
        files = f"/v1/sandboxes/{sandbox_id}/files/content"
        api.put(files, params={"path": "/tmp/www/index.html"}, content=STEALER.encode())
        api.post(
            f"/v1/sandboxes/{sandbox_id}/exec",
            json={
                "cmd": ["python3", "-m", "http.server", "8000", "-d", "/tmp/www"],
                "background": True,
            },
        )
        opened = api.post(f"/v1/sandboxes/{sandbox_id}/ports", json={"port": 8000, "public": True})
        path_url = opened.json()["path_url"]
    assert path_url.startswith(daemon.url)  # the console's origin
    wait_until(lambda: httpx.get(path_url, timeout=10).status_code == 200, 60)
    # The logged-in browser's session, in a tab of its own (its own connections: a connection
    # the console's page keeps alive stays the API's, see api/front.py).
    browser = page.context.browser
    assert browser is not None
    victim = browser.new_context(storage_state=page.context.storage_state())
    try:
        tab = victim.new_page()
        tab.goto(path_url)
        expect(tab).to_have_title(re.compile(r"^(blocked|stolen):"))
        assert tab.title().startswith("blocked:"), tab.title()
        # The session itself still works for the console's own page.
        tab.goto(f"{daemon.url}/console/")
        expect(tab.get_by_role("heading", name="Workspace")).to_be_visible()
    finally:
        victim.close()
