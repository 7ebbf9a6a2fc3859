"""The command line's root: the group, the one error wrapper, shared options.

The commands live next to this module (project_cmds, bisect_cmds,
report_cmds); `tfrepro/cli/__init__.py` registers them. Click commands only:
parse, one call into the library, print.

Heavy modules (TensorFlow, copier, git, rich, matplotlib) are imported inside
the commands that need them, so `tfrepro --help` stays instant. Library errors
become one message and an exit code in `_Group.invoke`, and only there.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import click

from tfrepro import __version__
from tfrepro.errors import TfreproError, UserError

EXIT_INTERRUPTED = 130


def _fail(message: str, code: int, as_json: bool, **extra: object) -> NoReturn:
    """The one way an error leaves the CLI: one message (a JSON object on
    stdout with --json), one exit code."""
    if as_json:
        click.echo(json.dumps({"status": "error", "error": message, "exit_code": code, **extra}))
    else:
        click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """The one place that turns errors into messages and exit codes:
    UserError and input errors 2, other failures 1, Ctrl-C or SIGTERM 130
    (finished trials are cached: the same command continues)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tfrepro.json"] = as_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as e:  # `tfrepro --bogus --json`: before any command runs
            if not as_json:
                raise
            _fail(e.format_message(), e.exit_code, True)

    def invoke(self, ctx: click.Context):
        from tfrepro.trials.sigterm import sigterm_interrupts

        as_json = bool(ctx.meta.get("tfrepro.json"))
        try:
            with sigterm_interrupts():
                return super().invoke(ctx)
        except UserError as e:
            _fail(e.render(), e.exit_code, as_json, where=e.where, hint=e.hint)
        except TfreproError as e:
            _fail(str(e), e.exit_code, as_json)
        except click.ClickException as e:
            if not as_json:
                raise
            _fail(e.format_message(), e.exit_code, True)
        except KeyboardInterrupt:
            _fail(
                "interrupted: finished trials are cached; run the same command again to continue",
                EXIT_INTERRUPTED,
                as_json,
                status="interrupted",
            )
        except Exception as e:  # the user's input: a file that cannot be read or decoded, a bad git revision
            if isinstance(e, UnicodeDecodeError):
                message = f"cannot decode a file as {e.encoding}: {e.reason} at byte {e.start}"
            elif isinstance(e, OSError) and e.filename is not None:
                message = f"{e.filename}: {e.strerror or e}"
            elif type(e).__name__ in ("GitCommandError", "BadName", "InvalidGitRepositoryError", "NoSuchPathError"):
                message = f"git: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
            else:
                raise
            _fail(message, 2, as_json)


def version_line() -> str:
    """`tfrepro --version`: tfrepro's version and the TensorFlow and Keras
    installed next to it, read from package metadata (instant: no import;
    only when asked, so the CLI's start-up does not read metadata)."""
    from tfrepro.dists import versions

    v = versions()
    return (
        f"tfrepro {__version__} (TensorFlow {v['tensorflow'] or 'not installed'}, "
        f"Keras {v['keras'] or 'not installed'}" + (f", tf_keras {v['tf_keras']}" if v["tf_keras"] else "") + ")"
    )


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_line())
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show tfrepro's version and the installed TensorFlow and Keras versions, and exit.",
)
def main() -> None:
    """Find the TensorFlow/Keras feature behind a NaN, a slowdown or a loss
    mismatch, and turn it into a minimal repro and a bug report."""


def use_color(stream) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (non-empty)."""
    return bool(stream.isatty()) and not os.environ.get("NO_COLOR")


def parse_names(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


path_argument = click.argument("path", default=".", type=click.Path(path_type=Path))


def _store_script_args(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    ctx.meta["tfrepro.script_args"] = value  # nargs=-1: a tuple
    return value


# `tfrepro bisect train.py -- --epochs 3`: the script's own arguments, passed
# to every trial (as `git bisect run` passes its command's); load_project reads them.
script_args_argument = click.argument(
    "script_args",
    nargs=-1,
    type=click.UNPROCESSED,
    expose_value=False,
    callback=_store_script_args,
    metavar="[-- SCRIPT_ARGS...]",
)


def script_args() -> tuple[str, ...]:
    """What `script_args_argument` stored; called inside a command only."""
    return click.get_current_context().meta.get("tfrepro.script_args", ())


replicas_option = click.option(
    "--replicas",
    type=click.IntRange(min=1, max=64),
    metavar="N",
    help="Split one device into N logical ones before the script's first op, so MirroredStrategy "
    "sees N replicas (default: [trial] replicas; N real GPUs are used as they are).",
)


def _trial_switch(ctx: click.Context, param: click.Parameter, on: bool) -> None:
    """--cold and --unconfined hold for every trial this process starts."""
    if on:
        from tfrepro.trials import confine, warm

        if param.name == "cold":
            warm.COLD = True
        else:
            confine.UNCONFINED = True


def cold_option(f):
    """--cold and --unconfined: how every command that runs trials starts them."""
    for name, help_ in (
        (
            "--unconfined",
            "Run trials even where no kernel confinement (bubblewrap overlay, Landlock) works: "
            "a trial can then write anywhere you can.",
        ),
        ("--cold", "Start every trial as a fresh interpreter instead of forking a warm one (slower; for comparison)."),
    ):
        f = click.option(name, is_flag=True, expose_value=False, callback=_trial_switch, help=help_)(f)
    return f


def select_options(f):
    """--only/--skip: choose among the features (names, name prefixes or kinds)."""
    f = click.option("--skip", metavar="A,B,...", help="Leave these features as written (not candidates).")(f)
    return click.option("--only", metavar="A,B,...", help="Only these features are candidates.")(f)


def load_project(path: Path, only: str | None, skip: str | None):
    """Project.load, saying so when the features were detected in memory (zero-edit)."""
    from tfrepro.project import Project

    project = Project.load(
        path, only=parse_names(only) if only else None, skip=parse_names(skip) or None, script_args=script_args()
    )
    if project.detected:
        click.echo(
            f"{len(project.feature_names)} features detected in memory (nothing written); "
            "`tfrepro annotate --write` to keep them",
            err=True,
        )
        for s in project.detection.skipped:  # a training loop is never skipped silently
            if s.reason.startswith("custom_loop:"):
                click.echo(f"  left alone: {s.where}: {s.reason}", err=True)
    for warning in project.warnings:
        click.echo(f"warning: {warning}", err=True)
    return project
