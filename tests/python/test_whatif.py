"""memseal.whatif on snapshots given as torch.cuda.memory._snapshot() gives them (a dict), as
pickle bytes and as a path: the same replay as `memseal whatif`, whether a setting avoids the
recorded out-of-memory error, and what it refuses. The traces are built here; each result follows
from the caching allocator's rules by hand."""

import pickle

import pytest

import memseal

MiB = 1 << 20


def snapshot(sizes, oom=None, conf=""):
    """Blocks of `sizes` MiB allocated in turn, each freed before the next (a batch that grows),
    then an out-of-memory error for `oom` = (requested MiB, device free MiB)."""
    trace = []
    for index, size in enumerate(sizes):
        address = index << 32
        trace.append({"action": "segment_alloc", "addr": address, "size": size * MiB, "stream": 0})
        for action in ("alloc", "free_requested", "free_completed"):
            trace.append({"action": action, "addr": address, "size": size * MiB, "stream": 0})
    if oom:
        trace.append({"action": "oom", "device_free": oom[1] * MiB, "size": oom[0] * MiB,
                      "stream": 0})
    return {"segments": [], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf}}


def test_a_growing_batch_reserves_a_segment_per_size_unless_segments_expand():
    report = memseal.whatif(snapshot([30, 32, 34, 36]), settings="expandable_segments:True")
    assert report.recorded["reserved_peak"] == (30 + 32 + 34 + 36) * MiB
    assert report.device_bytes is None  # no error recorded: unlimited
    assert report.row("(as recorded: the defaults)")["reserved_peak"] == (30 + 32 + 34 + 36) * MiB
    # Two 20 MiB pages hold every size in turn.
    assert report.row("expandable_segments:True")["reserved_peak"] == 40 * MiB
    assert report.avoids_the_error("expandable_segments:True") is None
    assert "expandable_segments:True" in report.text()
    assert report.to_dict()["schema"] == "memseal.whatif/1"


def test_whether_a_setting_avoids_the_recorded_error(tmp_path):
    # Then 60 MiB, which the run failed to get.
    grown = snapshot([30, 32, 34], oom=(60, 0))
    report = memseal.whatif(grown, settings=["expandable_segments:True", "max_split_size_mb:64"],
                            device_memory="96MiB")
    assert report.device_bytes == 96 * MiB
    recorded = report.row("(as recorded: the defaults)")
    assert not recorded["runs_out"]  # 60 MiB fit once the 96 MiB of cached segments went back
    assert recorded["cache_flushes"] == 1
    # Limited to 50 MiB, the 60 MiB request cannot fit under any setting.
    tight = memseal.whatif(grown, settings="expandable_segments:True", device_memory=50 * MiB)
    assert tight.avoids_the_error("expandable_segments:True") is False
    assert tight.row("(as recorded: the defaults)")["runs_out"]
    # The same from the pickle's bytes and from a file.
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(grown))
    for given in (pickle.dumps(grown, protocol=2), path, str(path)):
        again = memseal.whatif(given, settings="expandable_segments:True", device_memory=50 * MiB)
        assert again.to_dict()["settings"] == tight.to_dict()["settings"]


def test_what_is_not_a_snapshot_or_a_setting_is_refused():
    with pytest.raises(TypeError):
        memseal.whatif(42)
    with pytest.raises(ValueError, match="no device_traces"):
        memseal.whatif({"segments": []})
    with pytest.raises(ValueError, match="max_split_size_mb"):
        memseal.whatif(snapshot([30]), settings="max_split_size_mb:2")
    with pytest.raises(ValueError, match="not a size"):
        memseal.whatif(snapshot([30]), device_memory="plenty")
    with pytest.raises(ValueError, match="cannot read"):
        memseal.whatif("/nonexistent/snapshot.pickle")
