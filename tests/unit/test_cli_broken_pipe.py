"""A reader that leaves early (`safebeat status | head`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["plan", "--help"], ["migrate"]], ids=["help", "migrate"])
def test_a_closed_stdout_ends_the_command_without_an_error_line(
    tmp_path: Path, args: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    command = [sys.executable, "-m", "safebeat", "--url", url, *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line is written
    said = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert said == ""


#: A group run as safebeat's are, whose command writes a line, then to a socket whose peer is gone.
SOCKET_GONE = """
import socket

import click

from safebeat.cli.errors import invoke_with_one_line_errors


class Commands(click.Group):
    def invoke(self, ctx):
        return invoke_with_one_line_errors(ctx, lambda: super(Commands, self).invoke(ctx))


@click.group(cls=Commands)
def main() -> None:
    pass


@main.command()
def send() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    click.echo("connected")
    while True:
        ours.send(b"x" * 65536)


main(["send"])
"""


def test_a_socket_broken_pipe_is_an_error_line_not_a_reader_that_left() -> None:
    """A BrokenPipeError from a connection (a server that went away), while standard output
    is read, ends with its error line and status 1, not silently."""
    process = subprocess.run(
        [sys.executable, "-c", SOCKET_GONE], capture_output=True, text=True, timeout=60, check=False
    )
    assert process.stdout == "connected\n"
    assert process.returncode == 1
    assert process.stderr.startswith("Error: unexpected BrokenPipeError: [Errno 32] Broken pipe")
