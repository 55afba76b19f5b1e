"""The host's pip/npm settings as a build sandbox gets them (read from files, never hard-coded)."""

from __future__ import annotations

from pathlib import Path

from corral.images.host_packages import BUILD_CA_PATH, host_package_settings

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_pip_and_npm_files_become_build_env_and_the_ca_is_copied(tmp_path: Path) -> None:
    (tmp_path / ".config" / "pip").mkdir(parents=True)
    (tmp_path / "ca.pem").write_bytes(CA)
    (tmp_path / ".config" / "pip" / "pip.conf").write_text(
        "[global]\n"
        "index-url = https://mirror.test/simple\n"
        "extra-index-url = file:///opt/local/simple https://extra.test/simple\n"
        f"cert = {tmp_path / 'ca.pem'}\n"
        "[install]\ntrusted-host = mirror.test\n"
    )
    (tmp_path / ".npmrc").write_text(f"registry=https://npm.test/\ncafile={tmp_path / 'ca.pem'}\n")
    got = host_package_settings({"HOME": str(tmp_path)}, tmp_path, root=tmp_path)
    assert got.env["PIP_INDEX_URL"] == "https://mirror.test/simple"
    assert got.env["PIP_EXTRA_INDEX_URL"] == "https://extra.test/simple"  # file:// is not reachable
    assert got.env["PIP_TRUSTED_HOST"] == "mirror.test"
    assert got.env["NPM_CONFIG_REGISTRY"] == "https://npm.test/"
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "NPM_CONFIG_CAFILE", "NODE_EXTRA_CA_CERTS"):
        assert got.env[name] == BUILD_CA_PATH
    assert got.files == {BUILD_CA_PATH: CA}


def test_environment_wins_and_nothing_configured_means_the_tools_defaults(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pip.conf").write_text("[global]\nindex-url = https://file.test/simple\n")
    environ = {"HOME": str(tmp_path), "PIP_INDEX_URL": "https://env.test/simple"}
    got = host_package_settings(environ, tmp_path, root=tmp_path)
    assert got.env == {"PIP_INDEX_URL": "https://env.test/simple"}
    bare = host_package_settings({}, tmp_path / "home", root=tmp_path / "nothing")
    assert (bare.env, bare.files) == ({}, {})


def test_a_cert_setting_that_is_not_a_bundle_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "not-a-ca").write_text("hello")
    environ = {"HOME": str(tmp_path), "PIP_CERT": str(tmp_path / "not-a-ca")}
    got = host_package_settings(environ, tmp_path, root=tmp_path)
    assert "PIP_CERT" not in got.env and got.files == {}
