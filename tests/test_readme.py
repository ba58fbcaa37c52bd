"""The README is true: its commands exist, and every setting is documented."""

from __future__ import annotations

import os
import re
from dataclasses import fields

from server.config import ROOT, Settings

README = (ROOT / "README.md").read_text()


def test_the_quickstart_has_exactly_two_commands_that_exist() -> None:
    block = re.search(r"## Quickstart.*?```sh\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).strip().splitlines()]
    assert commands == ["scripts/serve", "scripts/test"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), command
    ci = (ROOT / ".ci/run").read_text()
    assert "scripts/test" in ci


def test_every_setting_is_documented() -> None:
    for field in fields(Settings):
        flag = "--" + field.name.replace("_", "-")
        env = "CHAT_" + field.name.upper()
        assert f"`{flag}`" in README and f"`{env}`" in README, field.name
