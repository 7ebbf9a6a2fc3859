"""Read event files back with a real TensorBoard (the `tensorboard` package:
its event loader and its HParams plugin's handlers), as `tensorboard --logdir`
would show them."""

from __future__ import annotations

from pathlib import Path


def scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of one event file or run directory: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _value(v):
    return getattr(v, v.WhichOneof("kind"))


def hparams_view(logdir: Path) -> tuple[dict[str, set], dict[str, tuple[dict, dict]]]:
    """What the HParams dashboard shows for `logdir`: the experiment's hparam
    domains {name: {values}} and each session group's (hparams, metrics)."""
    from tensorboard import context
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    tb = backend_context.Context(base_plugin.TBContext(data_provider=MultiplexerDataProvider(mux, str(logdir))))
    ctx = context.RequestContext()
    exp = get_experiment.Handler(ctx, tb, "", api_pb2.GetExperimentRequest()).run()
    domains = {h.name: {_value(v) for v in h.domain_discrete.values} for h in exp.hparam_infos}
    statuses = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING]
    req = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=statuses)
    groups = list_session_groups.Handler(ctx, tb, "", req).run().session_groups
    return domains, {
        g.name: (
            {k: _value(v) for k, v in g.hparams.items()},
            {m.name.tag: (m.training_step, m.value) for m in g.metric_values},
        )
        for g in groups
    }
