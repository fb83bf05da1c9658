"""A distributed job's ranks: the rank a report is of, the reports of every rank gathered to rank 0
over the job's own process group (Watch(gather=True)), and the merged view of rank reports
(memseal.merge), from the same core as `memseal merge`."""

import os

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal


def _process_group_ready():
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def rank_of_this_process():
    """The RankIdentity of this process: the launcher's variables (RANK, WORLD_SIZE, LOCAL_RANK),
    else torch.distributed once initialised (mp.spawn and the like); None outside a job."""
    identity = _memseal.rank_from_environment()
    if identity is not None or not _process_group_ready():
        return identity
    import torch.distributed as dist

    rank = dist.get_rank()
    local_rank = os.environ.get("LOCAL_RANK", "")
    return _memseal.RankIdentity(rank, int(local_rank) if local_rank.isdigit() else rank,
                                 dist.get_world_size())


def name_the_rank(report):
    """Gives `report` (a LeakReport) its rank where the core could not see it (no RANK set)."""
    if report.rank is None:
        identity = rank_of_this_process()
        if identity is not None:
            _memseal.set_report_rank(report._native, identity)


_gathers_taken = 0  # gathers this process took part in; every rank counts the same ones


def _job_store():
    """The key-value store the job's default process group was made with (TCPStore under torchrun,
    FileStore for file://), or None where torch does not expose it."""
    from torch.distributed import distributed_c10d

    try:
        return distributed_c10d._get_default_store()
    except (AttributeError, KeyError, ValueError):
        return None


def gather_to_rank_0(report):
    """Sends every rank's report to rank 0 through the store of the job's process group (the one
    its ranks met through: no other channel or port); rank 0 gets the merged view, the others None.
    Every rank should call it; only rank 0 waits.

    The store, not a collective of the process group: gather_object's tensors are made in Python,
    and a gloo worker thread that drops them after the program's last collective needs the GIL
    while the interpreter finalises, which aborts the process ("terminate called without an
    active exception"); NCCL would also need each rank's CUDA device set. A rank whose report never
    arrives (the store's timeout, the job's) is missing from the merged view, said as such."""
    if not _process_group_ready():
        raise RuntimeError("memseal: watch(gather=True) needs torch.distributed initialised "
                           "(init_process_group) when the watch ends, and every rank to end its watch")
    import torch.distributed as dist

    global _gathers_taken
    _gathers_taken += 1
    rank, world_size = dist.get_rank(), dist.get_world_size()
    store = _job_store()
    if store is None:
        raise RuntimeError("memseal: watch(gather=True) needs the store of the job's process group, "
                           "which this torch does not expose (distributed_c10d._get_default_store)")
    prefix = f"memseal/gather/{_gathers_taken}/"
    store.set(prefix + str(rank), report.to_json())
    if rank != 0:
        return None
    pairs, missing = [], []
    why = ("its report did not reach rank 0 within the job's store timeout (it did not end its "
           "watch with gather=True)")
    timed_out = False  # after one rank's timeout, the others are only looked for, not waited for
    for index in range(world_size):
        key = prefix + str(index)
        try:
            if timed_out and not store.check([key]):
                missing.append((index, world_size, why))
                continue
            pairs.append((store.get(key).decode(), f"rank {index}"))
        except RuntimeError:  # not there within the store's timeout
            timed_out = True
            missing.append((index, world_size, why))
            continue
        try:
            store.delete_key(key)
        except RuntimeError:  # a store without deletion keeps it; the job's store ends with it
            pass
    return _memseal.merge_json(pairs, missing)


def merge(reports, *, force=False):
    """The job's view of its ranks' reports: each cause matched across ranks ("all 4 ranks" or
    "rank 0 only"), missing ranks, the spread of their peaks. `reports`: LeakReport objects, JSON
    texts, paths of report files, or a folder (memseal run's memseal-RUN/: its rank-*.json).
    Returns a MergedReport (leak, world_size, ranks, findings, text(), to_json()). Reports of
    several jobs (other torchrun run ids) raise ValueError unless force=True."""
    if isinstance(reports, (str, os.PathLike)) and os.path.isdir(reports):
        folder = os.fspath(reports)
        names = sorted(name for name in os.listdir(folder)
                       if name.startswith("rank-") and name.endswith(".json"))
        if not names:
            raise ValueError(f"memseal: {folder} holds no rank reports (rank-N.json)")
        reports = [os.path.join(folder, name) for name in names]
    pairs = []
    for index, item in enumerate(reports):
        if hasattr(item, "to_json"):
            pairs.append((item.to_json(), f"report {index}"))
        elif isinstance(item, os.PathLike) or (isinstance(item, str)
                                                and not item.lstrip().startswith("{")):
            with open(item) as file:
                pairs.append((file.read(), os.fspath(item)))
        elif isinstance(item, str):
            pairs.append((item, f"report {index}"))
        else:
            raise TypeError(f"memseal: merge() takes LeakReports, JSON texts or paths, not "
                            f"{type(item).__name__}")
    if not pairs:
        raise ValueError("memseal: merge() needs at least one report")
    try:
        return _memseal.merge_json(pairs, force=bool(force))
    except ValueError as error:
        raise ValueError(f"memseal: {error}") from None
