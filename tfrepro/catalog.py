"""The feature catalog: for every kind of feature tfrepro knows, its name, what
it is, whether it changes the math on purpose (`affects_loss`, Contract 3),
and how it is switched off.

One table, read by both producers of feature blocks:
- `tfrepro annotate` (and zero-edit mode, which runs the same recognisers in
  memory) takes each feature's name, description, `affects_loss` and OFF
  stand-in from here;
- the copier templates are Jinja and cannot import this module when they
  render, so `tests/test_catalog.py` parses every template's feature blocks
  and its `tfrepro.toml` and checks that they agree with this table.

`affects_loss` is true exactly for the features that change the loss on
purpose: the order or content of what a step sees (shuffle, interleave,
parallel reads, non-deterministic tf.data, random augmentation), the
learning rate (schedules, warmup, LR callbacks, callbacks that stop or
retune training: any that sets `model.stop_training`), the objective or
update (class/sample weights, regularizers, label smoothing, gradient
clipping), and every feature whose OFF form computes something else (a
custom layer's stand-in). Such a feature is never blamed for a loss
mismatch: a configuration's mismatch reference has it on. A mismatch
culprit can only be a feature whose OFF form promises the same computation
(precision, strategy, XLA, a custom loop against fit, tf.data performance
options, cache).

Known costs (`known_cost`, at the end): documented costs of features on the
hardware they run on. A slowdown whose culprits are all such features
(mixed_float16 on a CPU, a distribution strategy over one replica, XLA's
compile time on a CPU, eager execution) is what the documentation says to
expect, not a bug: the bisect result carries `known_cost` (Contract 4:
reason, source, fix), the CLI prints it, and `report` writes an explanation
with the fix instead of drafting a bug report (unless `--force`). A matcher
over the trial's `extra["hardware"]` (inside/devices.py's `hardware`:
accelerators, the CPU's fp16/bf16 instructions, the most replicas in sync)
and the features' descriptions.

Pure data and lookups: no imports from the rest of tfrepro.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One kind of feature.

    `name` is the feature name, or the prefix of a family (`family=True`:
    `custom_layer_<class>`, `callback_<class>`). `description` may hold
    `{fields}` filled by the recogniser (`Entry.describe`), which writes the
    OFF part (in `annotate/`); `off_code`, when the OFF part is one constant
    expression standing in for the feature's, is that expression. Why an `affects_loss` entry changes
    the loss is said once, by group, in the module docstring.
    """

    name: str
    kind: str
    description: str
    affects_loss: bool = False
    off_code: str | None = None
    family: bool = False

    def describe(self, **fields: object) -> str:
        return self.description.format(**fields) if fields else self.description


# tf.distribute's strategy classes -> the feature each is (None: one device, nothing to
# switch off); annotate marks them, the report's setup scan names them.
STRATEGIES: dict[str, str | None] = {
    "MirroredStrategy": "mirrored_strategy",
    "MultiWorkerMirroredStrategy": "multi_worker_strategy",
    "CentralStorageStrategy": "central_storage_strategy",
    "TPUStrategy": "tpu_strategy",
    "ParameterServerStrategy": "parameter_server_strategy",
    "OneDeviceStrategy": None,
}

_ENTRIES: tuple[Entry, ...] = (
    # -- precision, distribution, compilation (same math, other numerics) --
    Entry("mixed_precision", "precision", "{policy} compute policy"),
    *(Entry(name, "strategy", "{cls}; off: the default strategy") for name in STRATEGIES.values() if name),
    Entry("sync_batchnorm", "strategy", "BatchNorm statistics all-reduced across replicas (synchronized=True)"),
    Entry("tf_function", "tf_function", "tf.function graph compilation; off: the function runs eagerly"),
    Entry("jit_compile", "xla", "XLA compilation (jit_compile); off: jit_compile=False", off_code="False"),
    Entry("xla", "xla", "compile the train step with XLA (jit_compile=True)"),
    Entry("xla_auto_jit", "xla", "XLA auto-clustering (set_jit)"),
    Entry("xla_flags", "xla", "XLA flags set in the environment ({var})"),
    Entry("eager_debug", "eager", "eager execution ({how})", off_code="False"),
    Entry("eager_debugging", "eager", "run every tf.function eagerly (debugging only: several times slower)"),
    Entry("memory_growth", "memory", "GPU memory growth"),
    Entry("custom_loop", "loop", "a tf.GradientTape training loop instead of fit, the same math"),
    Entry(
        "gradient_accumulation",
        "loop",
        "gradients of several micro-batches summed, then applied once (the same gradient as the whole batch)",
    ),
    Entry("custom_layer", "custom_layer", "the project's {cls} layer; off: {stock}", family=True, affects_loss=True),
    # -- tf.data: same examples, same order --------------------------------
    Entry("prefetch", "dataset", "tf.data prefetch (overlaps input and training); off: no prefetch"),
    Entry("cache", "dataset", "tf.data cache; off: no cache"),
    Entry("parallel_map", "dataset", "tf.data map with num_parallel_calls; off: sequential map"),
    Entry("parallel_batch", "dataset", "tf.data batch with num_parallel_calls; off: sequential batch"),
    # -- tf.data: other examples or another order (affects_loss) ----------
    Entry("shuffle", "dataset", "tf.data shuffle; off: input order kept", affects_loss=True),
    Entry(
        "interleave",
        "dataset",
        "tf.data interleave over files; off: flat_map (files one after another)",
        affects_loss=True,
    ),
    Entry(
        "parallel_reads",
        "dataset",
        "tf.data files read in parallel; off: one after another",
        affects_loss=True,
        off_code="None",
    ),
    Entry(
        "nondeterministic_data", "dataset", "tf.data may reorder elements (deterministic = False)", affects_loss=True
    ),
    Entry("random_augmentation", "augmentation", "random data augmentation ({cls}); off: identity", affects_loss=True),
    # -- learning rate (affects_loss) --------------------------------------
    Entry("lr_schedule", "lr_schedule", "{cls} learning-rate schedule; off: constant {constant}", affects_loss=True),
    Entry("lr_warmup", "lr_schedule", "linear learning-rate warmup (changes the loss on purpose)", affects_loss=True),
    # -- callbacks ----------------------------------------------------------
    Entry("callback", "callback", "{cls} callback passed to fit", family=True),
    *(
        Entry(name, "callback", "{cls} callback passed to fit (changes the learning rate)", affects_loss=True)
        for name in ("callback_lr_scheduler", "callback_reduce_lr_on_plateau")
    ),
    Entry(
        "callback_stopping",
        "callback",
        "{cls} callback passed to fit (stops training: sets model.stop_training)",
        affects_loss=True,
    ),
    Entry("callbacks", "callback", "callbacks passed to fit (EarlyStopping, ReduceLROnPlateau...)", affects_loss=True),
    # -- objective and update (affects_loss) --------------------------------
    *(
        Entry(name, "objective", desc, affects_loss=True, off_code=code)
        for name, desc, code in (
            ("class_weight", "class weights in fit ({arg}); off: unweighted", "None"),
            ("sample_weight", "sample weights in fit ({arg}); off: unweighted", "None"),
            ("regularizer", "weight regularizers ({arg}); off: none", "None"),
            ("label_smoothing", "label smoothing ({arg}); off: 0", "0.0"),
            ("gradient_clipping", "gradient clipping ({arg}); off: none", "None"),
        )
    ),
)

CATALOG: dict[str, Entry] = {e.name: e for e in _ENTRIES}

# Keyword arguments that are a feature wherever they appear with a value
# other than their default: keyword -> catalog name.
KEYWORDS: dict[str, str] = {
    "class_weight": "class_weight",
    "sample_weight": "sample_weight",
    "kernel_regularizer": "regularizer",
    "bias_regularizer": "regularizer",
    "activity_regularizer": "regularizer",
    "label_smoothing": "label_smoothing",
    "clipnorm": "gradient_clipping",
    "clipvalue": "gradient_clipping",
    "global_clipnorm": "gradient_clipping",
}
# The environment variables that switch XLA on (the `xla_flags` feature; `tfrepro env`
# names each in its XLA line).
XLA_VARS = ("TF_XLA_FLAGS", "XLA_FLAGS")
# The calls that set Keras's precision policy (Keras 3's `keras.config.set_dtype_policy`,
# TF 2.3's `mixed_precision.experimental.set_policy`): `sets_policy`.
POLICY_SETTERS = frozenset({"set_global_policy", "set_policy", "set_dtype_policy"})
# Keras preprocessing layers that draw random numbers in training.
RANDOM_LAYER_RE = re.compile(r"^Random[A-Z]\w*$")
# Callback classes that change the learning rate or stop training.
_LR_CALLBACK_RE = re.compile(r"(learning_?rate|(^|_)lr(_|$)|warm_?up|reduce_lr|one_?cycle|cyclic)", re.I)
_STOP_CALLBACK_RE = re.compile(r"(early_?stop|(^|_)stop(s|ping)?(_|$)|terminate)", re.I)
_SUFFIX_RE = re.compile(r"_\d+$")


def get(name: str) -> Entry | None:
    """The entry of a feature name: exact (`shuffle`), without an occurrence
    suffix (`callback_csv_logger_2`), or its family (`custom_layer_my_norm`)."""
    exact = CATALOG.get(name) or CATALOG.get(_SUFFIX_RE.sub("", name))
    return exact or next((e for e in _ENTRIES if e.family and name.startswith(e.name + "_")), None)


def kind_of(name: str) -> str | None:
    e = get(name)
    return e.kind if e else None


def affects_loss(name: str) -> bool:
    """Whether the feature `name` changes the math on purpose (catalog default;
    `[features.NAME] affects_loss` in tfrepro.toml overrides it)."""
    return get(name) is not None and callback_entry(None, name).affects_loss  # a callback: by its name


def callback_entry(class_name: str | None, feature: str, *, stops: bool = False) -> Entry:
    """The entry for a callback of class `class_name` named `feature`;
    `stops`: the class sets `model.stop_training` (annotate saw it)."""
    e = get(feature)
    if e is not None and e.name != "callback":
        return e
    if _LR_CALLBACK_RE.search(feature) or (class_name and _LR_CALLBACK_RE.search(snake(class_name))):
        return CATALOG["callback_lr_scheduler"]
    if stops or _STOP_CALLBACK_RE.search(feature) or (class_name and _STOP_CALLBACK_RE.search(snake(class_name))):
        return CATALOG["callback_stopping"]
    return CATALOG["callback"]


def sets_policy(dotted: str) -> bool:
    """Whether a call of `dotted` (`keras.mixed_precision.set_global_policy`)
    sets the precision policy: a setter under `mixed_precision` or `config`,
    or a bare `set_global_policy` (no other library has the name)."""
    name = dotted.rsplit(".", 1)[-1]
    return name in POLICY_SETTERS and ("mixed_precision" in dotted or "config" in dotted or name == "set_global_policy")


def snake(name: str) -> str:
    """`early_stopping` from `EarlyStopping`, `lr_scheduler` from `LRScheduler`:
    a feature name's part (never empty, a letter first)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = re.sub(r"[^a-zA-Z0-9]+", "_", s).strip("_").lower()
    return s if s[:1].isalpha() else "x_" + s


# -- known costs --------------------------------------------------------------
Hardware = Mapping[str, Any]


@dataclass(frozen=True)
class KnownCost:
    kind: str  # the catalog kind it applies to
    applies: Callable[[str, Hardware], bool]  # (feature description, hardware) -> whether it applies
    reason: str
    source: str
    fix: Callable[[Hardware], str]


def _fp16_on_plain_cpu(description: str, hw: Hardware) -> bool:
    """mixed_float16 with no accelerator, the CPU known (its flags read). A
    CPU's own float16 instructions do not make TensorFlow's CPU kernels fast:
    on an Intel Xeon with AVX512-FP16, TensorFlow 2.21 ran the journey's MLP
    80-123x slower under mixed_float16 (docs/benchmarks.md, 2026-12-03)."""
    return "bfloat16" not in description and not hw.get("accelerators") and hw.get("cpu_fp16") is not None


def _precision_fix(hw: Hardware) -> str:
    if hw.get("cpu_bf16"):
        return "use mixed_bfloat16 on this CPU (it has bfloat16 instructions), or keep float32"
    if hw.get("cpu_fp16"):
        return (
            "keep float32 on this CPU (its float16 instructions do not make TensorFlow's CPU kernels "
            "faster); use mixed_float16 on a GPU"
        )
    return "keep float32 on this CPU (it has neither float16 nor bfloat16 instructions); use mixed_float16 on a GPU"


COSTS: tuple[KnownCost, ...] = (
    KnownCost(
        "precision",
        _fp16_on_plain_cpu,
        "mixed_float16 on a CPU: TensorFlow computes float16 slowly there (emulated, even on a CPU with "
        "float16 instructions), the casts cost and nothing computes faster",
        "https://github.com/tensorflow/tensorflow/issues/45441 (expected: float16 is emulated on CPUs); "
        "https://www.tensorflow.org/guide/mixed_precision",
        _precision_fix,
    ),
    KnownCost(
        "strategy",
        lambda _d, hw: hw.get("replicas") == 1,
        "a distribution strategy over one replica: the cross-replica machinery runs and nothing is parallel",
        "https://www.tensorflow.org/guide/distributed_training",
        lambda _hw: "use the default strategy on one device; a strategy pays off with several replicas",
    ),
    KnownCost(
        "xla",
        lambda _d, hw: not hw.get("accelerators"),
        "XLA on a CPU: compile time, and XLA:CPU is often no faster than TensorFlow's own CPU kernels",
        "https://www.tensorflow.org/xla",
        lambda _hw: "leave XLA off on this CPU (jit_compile=False), or measure it on the accelerator it is for",
    ),
    KnownCost(
        "eager",
        lambda _d, _hw: True,
        "eager execution (run_eagerly / run_functions_eagerly) is slower than graph execution by design",
        "https://www.tensorflow.org/api_docs/python/tf/keras/Model#compile (run_eagerly: for debugging)",
        lambda _hw: "turn eager execution off outside debugging (run_eagerly=False)",
    ),
)


@dataclass(frozen=True)
class CostFound:
    """The culprits of a slowdown are known costs on this hardware: why, where
    it is documented, the fix (each joined over the culprits), the culprits."""

    reason: str
    source: str
    fix: str
    features: tuple[str, ...]

    def to_dict(self) -> dict[str, str | list[str]]:
        return {**asdict(self), "features": list(self.features)}


def known_cost(
    culprits: list[str] | tuple[str, ...],
    symptom: str | None,
    hardware: Hardware,
    describe: Callable[[str], str] = lambda _n: "",
) -> CostFound | None:
    """The known cost when every culprit of a slowdown is one on `hardware`;
    None otherwise."""
    if symptom != "slowdown" or not culprits:
        return None
    found = [
        next((c for c in COSTS if c.kind == kind_of(n) and c.applies(describe(n) or "", hardware)), None)
        for n in culprits
    ]
    if None in found:
        return None
    return CostFound(
        "; ".join(c.reason for c in found),
        "; ".join(c.source for c in found),
        "; ".join(c.fix(hardware) for c in found),
        tuple(culprits),
    )
