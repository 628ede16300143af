"""Every CLI command has help text, and the README documents every one of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from mnemofs.cli import cli

README = Path(__file__).resolve().parent.parent / "README.md"


def commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


ALL = list(commands())


def test_there_are_commands() -> None:
    assert ("memories", "create") in ALL
    assert ("db", "upgrade") in ALL


@pytest.mark.parametrize("words", ALL, ids=" ".join)
def test_every_command_has_help(words: tuple[str, ...]) -> None:
    command: click.Command = cli
    for word in words:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    assert command.help, f"mnemofs {' '.join(words)} has no help text"
    with pytest.raises(SystemExit) as info:
        cli.main([*words, "--help"], prog_name="mnemofs")
    assert info.value.code == 0


@pytest.mark.parametrize("words", ALL, ids=" ".join)
def test_readme_documents_every_command(words: tuple[str, ...]) -> None:
    assert f"mnemofs {' '.join(words)}" in README.read_text()


@pytest.mark.parametrize("path", sorted(README.parent.glob("examples/compose/*.yaml")), ids=str)
def test_compose_examples_parse(path: Path) -> None:
    """The compose examples are at least valid compose YAML (no engine here to run them)."""
    import yaml

    document = yaml.safe_load(path.read_text())
    assert set(document) <= {"services", "volumes", "networks"}
    for service in document["services"].values():
        assert "image" in service or "build" in service
        for volume in service.get("volumes", []):
            if isinstance(volume, dict) and volume.get("target") == "/mnt/memory":
                assert volume["bind"]["propagation"] == "rslave"
