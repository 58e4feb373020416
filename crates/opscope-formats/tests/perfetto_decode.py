#!/usr/bin/env python3
"""Independent decoder for opscope's Perfetto exporter tests.

Parses a trace with the official protos shipped in the Python `perfetto` package,
applies Perfetto's TrackEvent rules (per-sequence interning reset by
SEQ_INCREMENTAL_STATE_CLEARED, begin/end matched with a stack per track in timestamp
order, flows by id) and prints what the trace holds as one JSON object.

Usage: perfetto_decode.py TRACE
Exits with status 3 when the `perfetto` package is not installed.
"""

import json
import struct
import sys

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as error:
    print(f"perfetto_decode.py: the Python 'perfetto' package is missing ({error})",
          file=sys.stderr)
    sys.exit(3)

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
TABLES = ("event_names", "event_categories", "debug_annotation_names",
          "debug_annotation_string_values", "function_names", "source_paths")


def new_state():
    state = {table: {} for table in TABLES}
    state["frames"] = {}
    state["callstacks"] = {}
    return state


def text(entry):
    # EventName/EventCategory/DebugAnnotationName have `name`, InternedString `str`.
    if hasattr(entry, "str"):
        return entry.str.decode("utf-8")
    return entry.name


def float_bits(value):
    # Floats are printed as their IEEE-754 bits so that no JSON reader rounds them.
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def annotation(a, state):
    key = state["debug_annotation_names"].get(a.name_iid) if a.HasField("name_iid") else a.name
    which = a.WhichOneof("value")
    if which in ("int_value", "uint_value"):
        value = ["int", getattr(a, which)]
    elif which == "double_value":
        value = ["float", float_bits(a.double_value)]
    elif which == "bool_value":
        value = ["bool", a.bool_value]
    elif which == "string_value":
        value = ["str", a.string_value]
    elif which == "string_value_iid":
        value = ["str", state["debug_annotation_string_values"][a.string_value_iid]]
    elif which == "legacy_json_value":
        value = ["json", a.legacy_json_value]
    else:
        value = ["other", which]
    return [key, value]


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())

    states = {}
    tracks = {}
    counts = {"packets": 0, "begin": 0, "end": 0, "instant": 0, "counter": 0}
    events = []
    samples = []
    for packet in trace.packet:
        counts["packets"] += 1
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & CLEARED or packet.incremental_state_cleared:
            states[seq] = new_state()
        state = states.setdefault(seq, new_state())
        if packet.HasField("interned_data"):
            for table in TABLES:
                for entry in getattr(packet.interned_data, table):
                    state[table][entry.iid] = text(entry)
            for frame in packet.interned_data.frames:
                state["frames"][frame.iid] = frame
            for stack in packet.interned_data.callstacks:
                state["callstacks"][stack.iid] = list(stack.frame_ids)
        if packet.HasField("perf_sample"):
            sample = packet.perf_sample
            frames = []
            for iid in state["callstacks"].get(sample.callstack_iid, []):
                frame = state["frames"][iid]
                frames.append("%s %s:%d" % (state["function_names"][frame.function_name_id],
                                            state["source_paths"][frame.source_path_iid],
                                            frame.line_number))
            samples.append([f"thread {sample.pid} {sample.tid}", packet.timestamp, frames,
                            sample.timebase_count])
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        if packet.HasField("track_event"):
            te = packet.track_event
            name = state["event_names"][te.name_iid] if te.HasField("name_iid") else te.name
            cats = [state["event_categories"][i] for i in te.category_iids] + list(te.categories)
            events.append({
                "ts": packet.timestamp,
                "uuid": te.track_uuid,
                "type": te.type,
                "name": name,
                "category": ",".join(cats),
                "args": [annotation(a, state) for a in te.debug_annotations],
                "flow_ids": list(te.flow_ids),
                "terminating_flow_ids": list(te.terminating_flow_ids),
                "value": float_bits(te.double_counter_value)
                if te.HasField("double_counter_value") else te.counter_value,
            })

    def owner(uuid, depth=0):
        d = tracks.get(uuid)
        if d is None or depth > 64:
            return f"unknown {uuid}"
        if d.HasField("thread"):
            return f"thread {d.thread.pid} {d.thread.tid}"
        if d.HasField("process"):
            return f"process {d.process.pid}"
        parent = tracks.get(d.parent_uuid) if d.HasField("parent_uuid") else None
        if parent is not None and not parent.HasField("process"):
            return owner(d.parent_uuid, depth + 1)
        return f"track {d.name}"

    # Perfetto sorts by timestamp; events of equal time keep their order in the file.
    events.sort(key=lambda e: e["ts"])
    stacks = {}
    slices, instants, counters = [], [], []
    flow_from, flow_to = {}, {}
    TE = pb.TrackEvent
    for e in events:
        who = owner(e["uuid"])
        if e["type"] == TE.TYPE_SLICE_BEGIN:
            counts["begin"] += 1
            stacks.setdefault(e["uuid"], []).append(e)
        elif e["type"] == TE.TYPE_SLICE_END:
            counts["end"] += 1
            begin = stacks[e["uuid"]].pop()
            key = [who, begin["name"], begin["ts"]]
            slices.append([who, begin["name"], begin["category"], begin["ts"],
                           e["ts"] - begin["ts"], sorted(begin["args"], key=json.dumps)])
            for i in begin["flow_ids"]:
                flow_from[i] = key
            for i in begin["terminating_flow_ids"]:
                flow_to[i] = key
        elif e["type"] == TE.TYPE_INSTANT:
            counts["instant"] += 1
            instants.append([who, e["name"], e["category"], e["ts"],
                             sorted(e["args"], key=json.dumps)])
        elif e["type"] == TE.TYPE_COUNTER:
            counts["counter"] += 1
            counters.append([who, e["ts"], e["value"]])
    open_slices = sum(len(s) for s in stacks.values())

    processes = sorted([d.process.pid, d.process.process_name]
                       for d in tracks.values() if d.HasField("process"))
    threads = sorted([d.thread.pid, d.thread.tid, d.thread.thread_name]
                     for d in tracks.values() if d.HasField("thread"))
    flows = sorted([flow_from.get(i), flow_to.get(i)]
                   for i in set(flow_from) | set(flow_to))
    json.dump({
        "counts": counts,
        "open_slices": open_slices,
        "processes": processes,
        "threads": threads,
        "slices": slices,
        "instants": instants,
        "counters": counters,
        "flows": flows,
        "samples": samples,
    }, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
