"""`tfrepro env`: the environment a trial runs in, as text or JSON."""

from __future__ import annotations

import json

import click

from tfrepro.cli.app import main


@main.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print the environment as one JSON object.")
@click.option("--python", metavar="EXE", help="Describe the installation this interpreter runs (default: this one).")
def env_cmd(as_json: bool, python: str | None) -> None:
    """Versions (tfrepro, Python, TensorFlow, Keras, tf_keras, NumPy),
    devices, precision policy, XLA and determinism settings, and the TF_*,
    KERAS_*, CUDA_*, XLA_* environment variables (secret-looking values
    redacted, your home directory as ~).

    TensorFlow is imported in a child process only, as a trial would see it.
    """
    from tfrepro.report.envreport import collect_env, env_lines
    from tfrepro.trials.confine import detect

    doc = collect_env(python)
    conf = detect()
    doc["confinement"] = {"mode": conf.mode, "detail": conf.describe()}
    lines = [*env_lines(doc), f"confinement: {conf.describe()}"]
    click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(lines))
