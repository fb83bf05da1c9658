"""Would another CUDA caching-allocator setting have avoided the out-of-memory error? A memory
snapshot's allocations replayed through memseal's model of the allocator, from the same C++ core
as `memseal whatif` (docs/guides/whatif.md).

    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    ...                                               # the run, up to its OOM
    w = memseal.whatif(torch.cuda.memory._snapshot())  # or a path, or the pickle's bytes
    print(w.text())
    w.avoids_the_error("expandable_segments:True")    # True, False, or None (no error recorded)
"""

import os
import pickle

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._explain import _NativeReport


def _snapshot_bytes(snapshot):
    """(pickle bytes, source name) of a snapshot given as a dict, bytes or a path."""
    if isinstance(snapshot, dict):
        return pickle.dumps(snapshot, protocol=4), "snapshot"
    if isinstance(snapshot, (bytes, bytearray)):
        return bytes(snapshot), "snapshot"
    if isinstance(snapshot, (str, os.PathLike)):
        path = os.fspath(snapshot)
        try:
            with open(path, "rb") as file:
                return file.read(), path
        except OSError as error:
            raise ValueError(f"memseal: cannot read the snapshot {path!r}: {error.strerror}") from None
    raise TypeError("memseal: whatif() replays a CUDA memory snapshot (the dict of "
                    "torch.cuda.memory._snapshot(), its pickle's bytes or a path), not "
                    f"{type(snapshot).__name__}")


class WhatIfReport(_NativeReport):
    """A snapshot replayed under each setting (memseal.whatif/1): recorded (the run's own reserved
    peak and out-of-memory error), device_bytes, settings (dicts: setting, reserved_peak,
    allocated_peak, largest_free_block_at_peak, runs_out, out_of_memory_at, cache_flushes, and the
    memory reserved and free at the error). text(), to_json(), to_dict()."""

    recorded = property(lambda self: self._data["recorded"])
    device_bytes = property(lambda self: self._data["device_bytes"])
    settings = property(lambda self: self._data["settings"])

    def row(self, setting):
        """The replay under `setting` as it was given (or "(as recorded ...)"), or None."""
        return next((row for row in self.settings if row["setting"] == setting), None)

    def avoids_the_error(self, setting):
        """Whether `setting` would have avoided the recorded out-of-memory error: None where the
        run recorded none or the setting was not replayed."""
        row = self.row(setting)
        if row is None or self.recorded["out_of_memory_at"] is None:
            return None
        return not row["runs_out"]


def whatif(snapshot, settings=None, device_memory=None, device=None):
    """Replays the allocations of `snapshot` (torch.cuda.memory._snapshot()'s dict, its pickle's
    bytes, or a path to _dump_snapshot's file or memseal's --memory-viz file) under the run's own
    allocator settings and each of `settings` (PYTORCH_CUDA_ALLOC_CONF's syntax; by default
    expandable_segments:True, max_split_size_mb:128, roundup_power2_divisions:4). `device_memory`
    (bytes or "80GiB"): what the run may take; by default what the allocator had reserved at the
    recorded error and the device's free memory then, else unlimited. Raises ValueError for what is
    not such a snapshot or a setting the allocator would not take."""
    content, source = _snapshot_bytes(snapshot)
    if isinstance(settings, str):
        settings = [settings]
    device_bytes = device_memory
    if isinstance(device_memory, str):
        device_bytes = _memseal.parse_byte_size(device_memory)
        if device_bytes is None:
            raise ValueError(f"memseal: device_memory={device_memory!r} is not a size (80GiB)")
    try:
        native = _memseal.whatif_snapshot(content, source, list(settings or []), device_bytes,
                                          -1 if device is None else int(device))
    except ValueError as error:
        raise ValueError(f"memseal: {source}: {error}") from None
    return WhatIfReport(native)
