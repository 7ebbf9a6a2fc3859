"""The command line (`tfrepro`): the root group and its commands."""

from tfrepro.cli import bisect_cmds, project_cmds, report_cmds  # noqa: F401  (registers the commands)
from tfrepro.cli.app import main

__all__ = ["main"]
