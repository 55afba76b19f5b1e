"""Agent keys at rest: private files, written atomically, read back only when they are keys."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.service.agent_keys import IMAGE_KEY_FILE, AgentKeys


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_keys_are_private_unique_and_survive_a_restart(tmp_path: Path) -> None:
    keys = AgentKeys(tmp_path / "agent-keys")
    first = keys.issue("sb-aaaaaaaaaaaa")
    second = keys.issue("sb-bbbbbbbbbbbb")
    assert first != second and len(first) == 64
    assert mode(tmp_path / "agent-keys") == 0o700
    assert mode(tmp_path / "agent-keys" / "sb-aaaaaaaaaaaa") == 0o600
    assert AgentKeys(tmp_path / "agent-keys").get("sb-aaaaaaaaaaaa") == first  # a new daemon
    keys.forget("sb-aaaaaaaaaaaa")
    assert keys.get("sb-aaaaaaaaaaaa") is None
    assert os.listdir(tmp_path / "agent-keys") == ["sb-bbbbbbbbbbbb"]  # no temporary files


def test_an_image_carries_the_key_of_the_agent_in_its_memory(tmp_path: Path) -> None:
    keys = AgentKeys(tmp_path / "agent-keys")
    key = keys.issue("sb-aaaaaaaaaaaa")
    image = tmp_path / "parked" / "sb-aaaaaaaaaaaa.partial"
    keys.put_in_image("sb-aaaaaaaaaaaa", image)
    assert mode(image) == 0o700 and mode(image / IMAGE_KEY_FILE) == 0o600
    assert AgentKeys.of_image(image) == key


def test_a_planted_key_file_is_not_followed_or_trusted(tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (tmp_path / "elsewhere").write_text("a" * 64)
    (image / IMAGE_KEY_FILE).symlink_to(tmp_path / "elsewhere")
    assert AgentKeys.of_image(image) is None
    (image / IMAGE_KEY_FILE).unlink()
    (image / IMAGE_KEY_FILE).write_text("not a key\n")
    assert AgentKeys.of_image(image) is None
    (image / IMAGE_KEY_FILE).unlink()
    os.mkfifo(image / IMAGE_KEY_FILE)  # must not hang
    assert AgentKeys.of_image(image) is None
