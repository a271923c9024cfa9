"""Counters and timers, always on (torch_xla.debug.metrics' names).

Counters: TraceCount (ops recorded), CompileCount, CacheHit, CacheMiss, ExecuteCount,
SyncCount, AssumePureTrace, ... ; timers: TraceTime, CompileTime, ExecuteTime, ...
"""

from . import _lazytrace as _C

_M = _C._metrics


def metrics_report():
    """Every counter and timer, as text."""
    return _M.report()


short_metrics_report = metrics_report


def counter_names():
    return list(_M.counter_names())


def metric_names():
    return list(_M.timer_names())


def counter_value(name):
    """The counter's value, or None where it is zero or unknown (as torch_xla)."""
    v = _M.counter(name)
    return v if v else None


def metric_data(name):
    """(total_samples, accumulator_ns, samples) of a timer, or None where it has none
    (samples: the individual values are not kept, so an empty list)."""
    if name not in _M.timer_names():
        return None
    n = _M.counter(name + "Samples")
    if not n:
        return None
    return (n, _M.timer_ns(name), [])


def clear_all():
    """Zeros every counter and timer."""
    _M.reset()


def clear_counters():
    _M.reset()


def memory_bytes():
    """Bytes held by tensor buffers now."""
    return _M.memory_bytes()


def peak_memory_bytes():
    return _M.peak_memory_bytes()


def reset_peak_memory():
    _M.reset_peak_memory()
