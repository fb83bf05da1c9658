"""Checks a memseal memory_viz pickle the way PyTorch's readers read it.

Usage: memory_viz_check.py PICKLE [--expect-live-bytes N] [--expect-allocs N] [--expect-frees N]
                           [--expect-frame SUBSTRING] [--no-text-trace]
                           [--expect-cuda-devices N] [--expect-actions A,B,...]

Run it with a Python that has torch. The pickle must load with plain pickle.load before torch is
imported, hold only opcodes and list lengths the web viewer's own unpickler (MemoryViz.js) reads,
have the fields of torch.cuda.memory._snapshot(), and let the viewer's allocator-state view step
back through every event. Then torch.cuda._memory_viz reads it: segsum() must report the live
bytes the blocks hold (and N, when given) over as many segments, trace() must print one line per
allocation, free and segment, the frames must format, and trace_plot()/segment_plot() must build
their pages. CUDA devices (a caching allocator's real segments, several blocks each, and its
segment_map/segment_unmap/oom events) are checked the same way; --expect-cuda-devices N wants
device_traces[i] to be cuda:i for i < N and the CPU at N, as memseal orders them.
Prints each check; exits 0 when all pass, 1 when one fails, 2 on bad arguments or a missing file.
"""
import argparse
import bisect
import pickle
import pickletools
import re
import sys

# The opcodes MemoryViz.js's unpickle() handles; it throws on any other (GLOBAL, REDUCE, ...).
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
    "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
    "SHORT_BINUNICODE", "BINUNICODE", "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
}
# MemoryViz.js appends a list's items with one push(...items) call, which fails ("Maximum call stack
# size exceeded") past about 125000 items in V8 (node 20); torch's own trace default is 100000
# entries. libtorch's Pickler writes each list as one run of items, so no list may be longer.
VIEWER_MAX_LIST = 100000
SEGMENT_FIELDS = {"device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream", "segment_type", "frames", "blocks"}
BLOCK_FIELDS = {"address", "size", "requested_size", "state", "frames"}
EVENT_FIELDS = {"action", "addr", "size", "stream", "time_us", "frames"}
# torch's snapshot writes an out-of-memory entry's device free bytes in place of its address.
OOM_FIELDS = EVENT_FIELDS - {"addr"} | {"device_free"}
FRAME_FIELDS = {"name": str, "filename": str, "line": int}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, passed, what, detail=""):
        print(f"{'ok  ' if passed else 'FAIL'} {what}" + (f": {detail}" if detail else ""))
        if not passed:
            self.failed += 1
        return passed


def frames_problem(frames, where):
    """What is wrong with a frames list, or None."""
    if not isinstance(frames, list):
        return f"{where}: frames is {type(frames).__name__}, not a list"
    for i, frame in enumerate(frames):
        if not isinstance(frame, dict):
            return f"{where} frame {i} is {type(frame).__name__}, not a dict"
        for key, kind in FRAME_FIELDS.items():
            if not isinstance(frame.get(key), kind):
                return f"{where} frame {i}: '{key}' is {frame.get(key)!r}, not {kind.__name__}"
    return None


def structure_problems(data):
    """Every way `data` differs from what _snapshot() returns and the viewers read, as text."""
    if not isinstance(data, dict):
        return [f"top level is {type(data).__name__}, not a dict"]
    problems = []
    segments, traces = data.get("segments"), data.get("device_traces")
    if not isinstance(segments, list) or not isinstance(traces, list):
        return ["'segments' and 'device_traces' must both be lists"]
    for s, seg in enumerate(segments):
        missing = SEGMENT_FIELDS - set(seg)
        if missing:
            problems.append(f"segment {s} lacks {sorted(missing)}")
            continue
        if not 0 <= seg["device"] < len(traces):
            problems.append(f"segment {s} is on device {seg['device']}, "
                            f"but there are {len(traces)} device traces")
        end = seg["address"] + seg["total_size"]
        offset = seg["address"]
        for b, block in enumerate(seg["blocks"]):
            missing = BLOCK_FIELDS - set(block)
            if missing:
                problems.append(f"segment {s} block {b} lacks {sorted(missing)}")
                continue
            if block["address"] != offset or block["address"] + block["size"] > end:
                problems.append(f"segment {s} block {b} at {block['address']:#x} does not follow "
                                f"the blocks before it inside the segment")
            offset += block["size"]
            problems.append(frames_problem(block["frames"], f"segment {s} block {b}"))
        if offset != end:
            problems.append(f"segment {s}: blocks cover {offset - seg['address']} of "
                            f"{seg['total_size']} bytes")
    # A free requested but not completed at the end is a block a stream still uses.
    still_pending = {(seg["device"], block["address"]) for seg in segments
                     for block in seg.get("blocks", [])
                     if block.get("state") == "active_pending_free"}
    for d, trace in enumerate(traces):
        pending = {}  # free_requested not yet completed: address -> event index
        for e, event in enumerate(trace):
            wanted = OOM_FIELDS if event.get("action") == "oom" else EVENT_FIELDS
            missing = wanted - set(event)
            if missing:
                problems.append(f"device {d} event {e} lacks {sorted(missing)}")
                continue
            if event["action"] not in ACTIONS:
                problems.append(f"device {d} event {e}: unknown action {event['action']!r}")
            if event["action"] == "free_requested":
                pending[event["addr"]] = e
            elif event["action"] == "free_completed":
                pending.pop(event["addr"], None)
            problems.append(frames_problem(event["frames"], f"device {d} event {e}"))
        for addr, e in pending.items():
            if (d, addr) in still_pending:
                continue
            problems.append(f"device {d} event {e}: free_requested of {addr:#x} never completes")
    return [p for p in problems if p]


def longest_list(value):
    """The length of the longest list inside `value` (shared lists looked at once)."""
    longest, seen, pending = 0, set(), [value]
    while pending:
        item = pending.pop()
        if not isinstance(item, (list, tuple, dict)) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, list):
            longest = max(longest, len(item))
        pending.extend(item.values() if isinstance(item, dict) else item)
    return longest


def viewer_trace(trace):
    """The events as MemoryViz.js's annotate_snapshot() leaves them: a free_requested directly
    followed by a free_completed at the same address becomes one "free"."""
    merged = []
    for event in trace:
        if (event["action"] == "free_completed" and merged
                and merged[-1][0] == "free_requested" and merged[-1][1] == event["addr"]):
            merged[-1] = ("free", event["addr"], event["size"])
            continue
        merged.append((event["action"], event.get("addr"), event["size"]))
    return merged


def state_view_problems(data):
    """Replays the viewer's "Allocator State History": selecting event i undoes the events after it
    from the final state, then draws each live block inside the segment holding it, and fails
    (TypeError) on a block outside every segment or a free_requested whose block is missing. Every
    event can be selected, so every state from the last back to the first must hold. Expandable
    segments grow and shrink by ranges: undoing a segment_map takes its range out of the segment
    holding it, undoing a segment_unmap puts its range back."""
    problems = []
    for device, trace in enumerate(data["device_traces"]):
        segments, blocks = {}, {}  # address -> size
        for seg in data["segments"]:
            if seg["device"] != device:
                continue
            segments[seg["address"]] = seg["total_size"]
            addr = seg["address"]
            for block in seg["blocks"]:
                if block["state"] in ("active_allocated", "active_pending_free"):
                    blocks[addr] = block["size"]
                addr += block["size"]
        segment_starts, block_starts = sorted(segments), sorted(blocks)

        def in_segment(addr):
            i = bisect.bisect_right(segment_starts, addr) - 1
            return i >= 0 and addr < segment_starts[i] + segments[segment_starts[i]]

        def add_block(addr, size):
            if addr not in blocks:
                bisect.insort(block_starts, addr)
            blocks[addr] = size
            return in_segment(addr)

        def segment_at(addr):
            i = bisect.bisect_right(segment_starts, addr) - 1
            if i >= 0 and addr < segment_starts[i] + segments[segment_starts[i]]:
                return segment_starts[i]
            return None

        def take_range(addr, size):
            """Undoes a mapping: False when no one segment holds [addr, addr + size)."""
            start = segment_at(addr)
            if start is None or addr + size > start + segments[start]:
                return False
            end = start + segments.pop(start)
            del segment_starts[bisect.bisect_left(segment_starts, start)]
            for piece_start, piece_end in ((start, addr), (addr + size, end)):
                if piece_end > piece_start:
                    segments[piece_start] = piece_end - piece_start
                    bisect.insort(segment_starts, piece_start)
            return True

        def blocks_in(addr, size):
            inside = bisect.bisect_left(block_starts, addr)
            return inside < len(block_starts) and block_starts[inside] < addr + size

        where = f"device {device}"
        problems += [f"{where}: block {a:#x} lies in no segment" for a in blocks
                     if not in_segment(a)]
        events = viewer_trace(trace)
        for i in range(len(events) - 1, 0, -1):
            action, addr, size = events[i]
            if action in ("free", "free_completed"):
                if not add_block(addr, size):
                    problems.append(f"{where}: before event {i} ({action} {addr:#x}) its block "
                                    "lies in no segment")
            elif action == "free_requested":
                if addr not in blocks:
                    problems.append(f"{where}: event {i} requests a free of {addr:#x}, which is "
                                    "not live after it")
            elif action == "alloc":
                if blocks.pop(addr, None) is not None:
                    del block_starts[bisect.bisect_left(block_starts, addr)]
            elif action == "segment_free":
                if addr not in segments:
                    bisect.insort(segment_starts, addr)
                segments[addr] = size
            elif action == "segment_unmap":
                if segment_at(addr) is not None:
                    problems.append(f"{where}: event {i} unmaps {addr:#x}, which the events "
                                    "after it still hold")
                    continue
                segments[addr] = size
                bisect.insort(segment_starts, addr)
            elif action == "segment_map":
                if not take_range(addr, size):
                    problems.append(f"{where}: event {i} maps {addr:#x}, which the events "
                                    "after it do not hold")
                elif blocks_in(addr, size):
                    problems.append(f"{where}: before event {i} (segment_map {addr:#x}) a block "
                                    "lies in no segment")
            elif action == "segment_alloc":
                if segments.pop(addr, None) is None:
                    problems.append(f"{where}: event {i} makes segment {addr:#x}, which the "
                                    "events after it do not hold")
                    continue
                del segment_starts[bisect.bisect_left(segment_starts, addr)]
                inside = bisect.bisect_left(block_starts, addr)
                if inside < len(block_starts) and block_starts[inside] < addr + size:
                    problems.append(f"{where}: before event {i} (segment_alloc {addr:#x}) block "
                                    f"{block_starts[inside]:#x} lies in no segment")
            if len(problems) > 5:
                break
    return problems


def all_frames(data):
    for seg in data["segments"]:
        yield seg["frames"]
        for block in seg["blocks"]:
            yield block["frames"]
    for trace in data["device_traces"]:
        for event in trace:
            yield event["frames"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pickle")
    parser.add_argument("--expect-live-bytes", type=int)
    parser.add_argument("--expect-allocs", type=int)
    parser.add_argument("--expect-frees", type=int)
    parser.add_argument("--expect-frame", metavar="SUBSTRING")
    parser.add_argument("--expect-cuda-devices", type=int, metavar="N")
    parser.add_argument("--expect-actions", metavar="A,B,...",
                        help="actions every one of which some CUDA device trace must hold")
    parser.add_argument("--no-text-trace", action="store_true",
                        help="skip torch's trace() text dump, quadratic in the allocations")
    args = parser.parse_args()
    try:
        with open(args.pickle, "rb") as f:
            raw = f.read()
    except OSError as error:
        print(f"memory_viz_check: cannot read {args.pickle}: {error.strerror}", file=sys.stderr)
        return 2
    checks = Checks()
    print(f"checking {args.pickle} ({len(raw)} bytes)")

    # The viewer's unpickler first: it is the strictest reader.
    opcodes = {}
    try:
        for op, arg, _ in pickletools.genops(raw):
            opcodes[op.name] = arg if op.name == "PROTO" else None
    except Exception as error:  # pickletools raises ValueError and others on a malformed stream
        checks.check(False, "the file is a pickle", str(error))
        return 1
    unknown = sorted(set(opcodes) - VIEWER_OPCODES)
    checks.check(not unknown, "only opcodes MemoryViz.js reads", ", ".join(unknown))
    checks.check(2 <= opcodes.get("PROTO", 0) <= 4, "pickle protocol 2 to 4",
                 f"protocol {opcodes.get('PROTO')}")

    # Plain pickle.load, before anything imports torch: no torch reconstructors inside.
    torch_loaded_before = "torch" in sys.modules
    try:
        data = pickle.loads(raw)
    except Exception as error:
        checks.check(False, "pickle.load reads it", f"{type(error).__name__}: {error}")
        return 1
    if torch_loaded_before:
        print("ok   pickle.load reads it (torch was imported already)")
    else:
        checks.check("torch" not in sys.modules, "pickle.load reads it without torch")
    problems = structure_problems(data)
    checks.check(not problems, "fields of torch.cuda.memory._snapshot()",
                 "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                                            if len(problems) > 5 else ""))
    if problems:
        return 1
    about = data.get("memseal", {})
    print(f"     schema {about.get('schema')} version {about.get('version')}, "
          f"devices {about.get('devices')}")

    if args.expect_cuda_devices is not None:
        n = args.expect_cuda_devices
        want = [f"cuda:{i}" for i in range(n)] + ["cpu"]
        checks.check(about.get("devices") == want and len(data["device_traces"]) == n + 1,
                     f"device_traces are {want}", f"the file has {about.get('devices')}")
    if args.expect_actions:
        cuda_actions = {event["action"] for d, trace in enumerate(data["device_traces"])
                        for event in trace
                        if str((about.get("devices") or [""] * (d + 1))[d]).startswith("cuda")}
        wanted = set(args.expect_actions.split(","))
        checks.check(wanted <= cuda_actions, f"CUDA traces hold {sorted(wanted)}",
                     f"missing {sorted(wanted - cuda_actions)}")
        blocks_per_segment = max((len(seg["blocks"]) for seg in data["segments"]), default=0)
        checks.check(blocks_per_segment >= 3, "a CUDA segment holds several blocks",
                     f"at most {blocks_per_segment}")

    longest = longest_list(data)
    checks.check(longest <= VIEWER_MAX_LIST,
                 f"no list longer than MemoryViz.js reads ({VIEWER_MAX_LIST} items)",
                 f"the longest has {longest}")
    problems = state_view_problems(data)
    checks.check(not problems, "the viewer's allocator-state view can show every event",
                 "; ".join(problems[:5]))

    from torch.cuda import _memory_viz as viz

    events = [event for trace in data["device_traces"] for event in trace]
    actions = [event["action"] for event in events]
    live = sum(block["requested_size"] for seg in data["segments"] for block in seg["blocks"]
               if block["state"] == "active_allocated")
    if args.expect_live_bytes is not None:
        checks.check(live == args.expect_live_bytes, f"live bytes {args.expect_live_bytes}",
                     f"the blocks hold {live}")

    try:
        summary = viz.segsum(data)
    except Exception as error:
        checks.check(False, "segsum() runs", f"{type(error).__name__}: {error}")
        summary = ""
    if summary:
        segments_line = re.search(r"^segments: (\d+)$", summary, re.M)
        checks.check(segments_line is not None
                     and int(segments_line.group(1)) == len(data["segments"]),
                     f"segsum() reports {len(data['segments'])} segments",
                     segments_line.group(0) if segments_line else "no 'segments:' line")
        want = f"total_allocated: {viz.Bytes(live)}"
        allocated_line = re.search(r"^total_allocated: .*$", summary, re.M)
        checks.check(allocated_line is not None and allocated_line.group(0) == want,
                     f"segsum() reports '{want}' ({live} bytes)",
                     allocated_line.group(0) if allocated_line else "no 'total_allocated:' line")

    want_allocs, want_frees = actions.count("alloc"), actions.count("free_requested")
    if args.expect_allocs is not None:
        checks.check(want_allocs == args.expect_allocs, f"{args.expect_allocs} allocations",
                     f"the trace has {want_allocs}")
    if args.expect_frees is not None:
        checks.check(want_frees == args.expect_frees, f"{args.expect_frees} frees",
                     f"the trace has {want_frees}")

    # trace() looks up each allocation's segment by scanning every segment made so far: with a
    # segment per allocation it takes quadratic time (about a minute for 20000 allocations).
    printed = None
    if args.no_text_trace:
        print("skip trace(): --no-text-trace")
    else:
        try:
            printed = viz.trace(data)
        except Exception as error:
            checks.check(False, "trace() runs", f"{type(error).__name__}: {error}")
    if printed is not None:
        entries = sum(int(n) for n in re.findall(r"^(\d+) entries$", printed, re.M))
        checks.check(entries == len(events), f"trace() lists {len(events)} events",
                     f"it says {entries} entries")
        # "b = a[0:4.0KiB]" (in segment a), "b = MEM[...]", "b = seg_3[...]"; not "a = cudaMalloc(".
        alloc_lines = len(re.findall(r"^\S+ = \S+?\[", printed, re.M))
        free_lines = len(re.findall(r"^del ", printed, re.M))
        checks.check(alloc_lines == want_allocs, f"trace() prints {want_allocs} allocations",
                     f"it prints {alloc_lines}")
        checks.check(free_lines == want_frees, f"trace() prints {want_frees} frees",
                     f"it prints {free_lines}")
        made = len(re.findall(r"^\S+ = cudaMalloc\(", printed, re.M))
        released = len(re.findall(r"^cudaFree\(", printed, re.M))
        want_made, want_released = actions.count("segment_alloc"), actions.count("segment_free")
        checks.check(made == want_made and released == want_released,
                     f"trace() prints {want_made} segments made and {want_released} released",
                     f"it prints {made} and {released}")

    # Frame text as memory_viz formats it (flame graphs root first, so reversed).
    try:
        distinct = {id(frames): frames for frames in all_frames(data)}
        formatted = [viz._frames_fmt(frames, reverse=True) for frames in distinct.values()]
        checks.check(True, f"_frames_fmt() formats {len(formatted)} distinct stacks")
    except Exception as error:
        checks.check(False, "_frames_fmt() formats every stack", f"{type(error).__name__}: {error}")
    if args.expect_frame is not None:
        found = next((frame for frames in all_frames(data) for frame in frames
                      if args.expect_frame in frame["name"]
                      or args.expect_frame in frame["filename"]), None)
        checks.check(found is not None, f"a frame contains {args.expect_frame!r}",
                     viz._frame_fmt(found, full_filename=True) if found else "none does")

    for plot in ("trace_plot", "segment_plot"):
        try:
            page = getattr(viz, plot)(data)
            checks.check("MemoryViz.js" in page, f"{plot}() builds its page", f"{len(page)} chars")
        except Exception as error:
            checks.check(False, f"{plot}() builds its page", f"{type(error).__name__}: {error}")

    print("memory_viz check " + ("passed" if checks.failed == 0 else
                                 f"FAILED ({checks.failed} checks)"))
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
