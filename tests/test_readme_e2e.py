"""The README is a test: its command blocks, run as written, in order.

The blocks of "The loop, starting from your own script", "More ways in" and
"Scripting, git bisect, the environment" (shell completion included) are
read out of README.md and each line runs through bash as written, `tfrepro`
replaced by this venv's executable and nothing else, in a real git
repository holding an unmarked `train.py` and no tfrepro.toml: tag v1.2 is a
healthy regression, a later commit ("log-scaled features") adds a custom
layer taking `tf.math.log` of a linear layer's output (NaN at step 1 on any
CPU), then an unrelated commit. Each line's exit code and what it must name
are checked (the culprit feature, the planted commit). `tfrepro report`
also runs after the commit bisect (the README's loop reports the latest run).

Not run, each for its reason (SKIPPED): `cd my-training-repo` (the test's
cwd is the repository), the `--tf-versions` line (it builds one environment
per release from the package index: ~1.2 GB each, no network here; version
mode is tests/test_versions.py's, with fake environments), and the zsh/fish
completion lines where that shell is not installed. `git bisect start BAD
GOOD` takes the repository's `HEAD v1.2` for its placeholders, and the
markers `annotate --write` wrote are dropped (`git checkout -- train.py`)
before git bisect checks commits out, as a user would commit or drop them.
The script trains 6 steps, so the whole test is a few dozen short trials.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("## The loop, starting from your own script", "More ways in:", "## Scripting, git bisect, the environment")
TFREPRO = Path(sys.executable).with_name("tfrepro")
CULPRIT = "custom_layer_log_features"
PLANTED = "log-scaled features"

HEALTHY = """\
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")

ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([
    keras.Input(shape=(8,)),
    keras.layers.Dense(16, activation="tanh"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(ds, epochs=1, steps_per_epoch=6, verbose=0,
          callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=3)])
"""
LAYER = '''

class LogFeatures(keras.layers.Layer):
    """Log-scaled activations (for heavy-tailed inputs)."""

    def call(self, inputs):
        return tf.math.log(inputs)

'''
BROKEN = HEALTHY.replace("\nds = tf.data", LAYER + "\nds = tf.data").replace(
    '    keras.layers.Dense(16, activation="tanh"),\n', "    keras.layers.Dense(16),\n    LogFeatures(),\n"
)


def readme_blocks() -> list[str]:
    """The ```sh blocks of each section, in order (a section ends at the next `## `)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines: list[str] = []
    for i, title in enumerate(SECTIONS):
        start = text.index(title)
        ends = [text.find("\n## ", start + len(title))] + [text.find(t, start + len(title)) for t in SECTIONS[i + 1 :]]
        end = min((e for e in ends if e > 0), default=len(text))
        part = text[start:end]
        for block in re.findall(r"```sh\n(.*?)```", part, re.S):
            lines += [line for line in block.splitlines() if line.strip()]
    return lines


def skip_reason(line: str) -> str | None:
    if line.startswith("cd my-training-repo"):
        return "the test's cwd is the repository"
    if "--tf-versions" in line:
        return "builds an environment per release from the package index (no network; tests/test_versions.py)"
    for shell in ("zsh", "fish"):
        if f"{shell}_source" in line and shutil.which(shell) is None:
            return f"{shell} is not installed"
    return None


def as_run(line: str, repo: GitRepo) -> str:
    """The line with `tfrepro` replaced by this venv's executable (the one substitution),
    and git bisect's placeholders by the repository's ends."""
    line = re.sub(r"(?<![\w./-])tfrepro(?![\w.-])", str(TFREPRO), line)
    if line.startswith("git bisect start BAD GOOD"):
        line = line.replace("BAD GOOD", "HEAD v1.2", 1)
    return line


# what each README line must do: (exit code, texts its output must hold)
EXPECT = [
    ("tfrepro features train.py", 0, [CULPRIT, "prefetch", "callback_early_stopping"]),
    ("tfrepro bisect train.py", 0, [f"nan: caused by {CULPRIT}"]),
    ("tfrepro report", 0, [f"culprits: {CULPRIT}", "reproduced by the exported repro.py: yes", "op `Log`"]),
    ("tfrepro annotate train.py --write", 0, []),
    ("tfrepro run train.py --all", 1, []),
    ("tfrepro check train.py", 0, ["baseline (every feature off)", "5 pass, 0 warn, 0 fail"]),
    ("tfrepro bisect --good v1.2 --bad HEAD", 0, [PLANTED]),
    ("tfrepro new myrepro --defaults", 0, []),
    ("tfrepro new --from train.py", 0, ["repro-train"]),
    ("tfrepro clean", 0, []),
    ("tfrepro env --json", 0, []),
    ("tfrepro env", 0, ["TensorFlow"]),
    ("tfrepro --version", 0, ["tfrepro"]),
    ("git bisect start", 0, []),
    ("git bisect run", 0, ["is the first bad commit", PLANTED]),
    ("git bisect reset", 0, []),
    ("eval", 0, []),
    ("_TFREPRO_COMPLETE=fish_source", 0, []),
]


def expected(line: str) -> tuple[int, list[str]]:
    for prefix, code, texts in EXPECT:
        if line.startswith(prefix):
            return code, texts
    raise AssertionError(f"a README line this test does not know: {line!r} (add what it must do to EXPECT)")


def test_the_readme_command_blocks_run_as_written(tmp_path):
    if not TFREPRO.is_file():
        pytest.skip(f"no tfrepro executable next to {sys.executable}")
    home = tmp_path / "home"
    repo = GitRepo.init(tmp_path / "my-training-repo", home)
    repo.commit("train: a small regression", {"train.py": HEALTHY})
    repo.git("tag", "v1.2")
    repo.commit("notes", {"NOTES.md": "notes\n"})
    planted = repo.commit(PLANTED, {"train.py": BROKEN})
    repo.commit("more notes", {"NOTES.md": "notes\nmore\n"})
    env = {**repo.env, "NO_COLOR": "1", "COLUMNS": "200"}
    lines = readme_blocks()
    assert len(lines) >= 17, lines
    ran, skipped = [], []
    for line in lines:
        why = skip_reason(line)
        if why:
            skipped.append((line, why))
            continue
        if line.startswith("git bisect start"):
            repo.git("checkout", "--", "train.py")  # annotate's markers dropped before git checks commits out
        code, texts = expected(line)
        out = subprocess.run(
            ["bash", "-c", as_run(line, repo)], cwd=repo.root, env=env, capture_output=True, text=True, timeout=900
        )
        said = out.stdout + out.stderr
        assert out.returncode == code, f"{line}\nexit {out.returncode}\n{said[-4000:]}"
        for text in texts:
            assert text in said, f"{line}: {text!r} not in\n{said[-4000:]}"
        if line.startswith("tfrepro env --json"):
            assert json.loads(out.stdout)["versions"]["tensorflow"]
        if line.startswith("git bisect run"):
            assert f"{planted} is the first bad commit" in said
        if line.startswith("tfrepro bisect --good"):
            # the README's loop reports the latest run: after commit mode too
            rep = subprocess.run(
                [str(TFREPRO), "report", "--no-localize"], cwd=repo.root, env=env, capture_output=True, text=True
            )
            assert rep.returncode == 0, rep.stdout + rep.stderr
            assert f"first bad commit: {planted}" in rep.stdout
        ran.append(line)
    assert [line for line, _ in skipped if "--tf-versions" in line], "the version line is skipped by name, not lost"
    assert len(ran) == len(lines) - len(skipped) and len(ran) >= 15, ran
    assert len(lines) == len(set(lines)), "each README line once"
