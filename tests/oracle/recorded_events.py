#!/usr/bin/env python3
"""Independent reader of the files `opscope record` writes (`opscope-<pid>.pftrace`).

Decodes each file with the official protos of the Python `perfetto` package and applies
Perfetto's TrackEvent rules itself: zlib `compressed_packets`, per-sequence interning
and defaults reset by SEQ_INCREMENTAL_STATE_CLEARED, sequence-scoped incremental clocks
tied to CLOCK_MONOTONIC by a clock snapshot, begin/end matched with a stack per track.
A file cut off by a kill keeps the packets before the cut.

Usage: recorded_events.py FILE...
Prints one JSON object: {path: {"pid", "pids" (every process described), "process_name", "threads": {tid: name},
"slices": [[tid or track name, category, name, ts, dur, args]], "instants": [...],
"counters": {name: samples}, "counter_values": {"process name/track name": [values]}, "snapshot" (the first snapshot of the
built-in clocks: {clock id: ns}), "primary_clock" (that snapshot's primary trace clock, Perfetto's default 6, BOOTTIME,
when it names none),
"truncated": bool}}. Exits with status 3 when the
`perfetto` package is missing.
"""

import json
import sys
import zlib

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as error:
    print(f"recorded_events.py: the Python 'perfetto' package is missing ({error})", file=sys.stderr)
    sys.exit(3)

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
MONOTONIC = 3
TYPE_BEGIN, TYPE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4


def varint(data, pos):
    value = shift = 0
    while True:
        if pos >= len(data):
            raise EOFError
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def packets(data):
    """The TracePackets of a Trace, framed by hand so that a cut-off end is tolerated;
    returns (packets, truncated)."""
    out, pos = [], 0
    while pos < len(data):
        try:
            key, body = varint(data, pos)
            length, body = varint(data, body)
        except EOFError:
            return out, True
        if key != (1 << 3 | 2) or body + length > len(data):
            return out, True
        packet = pb.TracePacket()
        packet.ParseFromString(data[body:body + length])
        pos = body + length
        if packet.HasField("compressed_packets"):
            inner, cut = packets(zlib.decompress(packet.compressed_packets))
            out.extend(inner)
            if cut:
                return out, True
        else:
            out.append(packet)
    return out, False


def arg(a):
    which = a.WhichOneof("value")
    return [a.name, getattr(a, which) if which else None]


def read(path):
    with open(path, "rb") as f:
        all_packets, truncated = packets(f.read())
    tracks, sequences = {}, {}
    pid, process_name, pids = None, None, set()
    for p in all_packets:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            t = tracks.setdefault(d.uuid, {})
            if d.HasField("parent_uuid"):
                t["parent"] = d.parent_uuid
            if d.HasField("process"):
                pid, process_name = d.process.pid, d.process.process_name
                pids.add(d.process.pid)
                t["process_name"] = d.process.process_name
            if d.HasField("thread"):
                t["tid"] = d.thread.tid
                if d.thread.thread_name:
                    t["thread_name"] = d.thread.thread_name
            if d.name:
                t["name"] = d.name
    threads = {str(t["tid"]): t.get("thread_name", "") for t in tracks.values() if "tid" in t}

    stacks, slices, instants, counters, counter_values = {}, [], [], {}, {}
    snapshot = {}  # the first snapshot of the built-in clocks: {clock id: ns}
    primary_clock = 6
    for p in all_packets:
        seq_id = p.trusted_packet_sequence_id
        if p.sequence_flags & CLEARED:
            sequences[seq_id] = {"names": {}, "cats": {}, "clocks": {}, "clock": None, "track": None}
        seq = sequences.setdefault(seq_id, {"names": {}, "cats": {}, "clocks": {}, "clock": None, "track": None})
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            if d.HasField("timestamp_clock_id"):
                seq["clock"] = d.timestamp_clock_id
            if d.HasField("track_event_defaults"):
                seq["track"] = d.track_event_defaults.track_uuid
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c for c in p.clock_snapshot.clocks}
            if not snapshot and not any(c.clock_id >= 64 for c in clocks.values()):
                snapshot = {str(c.clock_id): c.timestamp for c in clocks.values()}
                if p.clock_snapshot.HasField("primary_trace_clock"):
                    primary_clock = p.clock_snapshot.primary_trace_clock
            for c in clocks.values():
                if c.clock_id >= 64:
                    seq["clocks"][c.clock_id] = {"last": c.timestamp, "at": c.timestamp,
                                                 "ref": clocks[MONOTONIC].timestamp}
        if p.HasField("interned_data"):
            for e in p.interned_data.event_names:
                seq["names"][e.iid] = e.name
            for e in p.interned_data.event_categories:
                seq["cats"][e.iid] = e.name
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq["clock"]
        if clock in seq["clocks"]:
            c = seq["clocks"][clock]
            c["last"] += p.timestamp
            ts = c["ref"] + (c["last"] - c["at"])
        else:
            assert clock in (None, MONOTONIC), f"unexpected clock {clock}"
            ts = p.timestamp
        uuid = e.track_uuid if e.HasField("track_uuid") else seq["track"]
        track = tracks.get(uuid, {})
        where = track.get("tid", track.get("name"))
        name = seq["names"].get(e.name_iid) if e.HasField("name_iid") else e.name
        cats = [seq["cats"][i] for i in e.category_iids] + list(e.categories)
        args = dict(arg(a) for a in e.debug_annotations)
        if e.type == TYPE_BEGIN:
            stacks.setdefault(uuid, []).append([where, ",".join(cats), name, ts, args])
        elif e.type == TYPE_END:
            stack = stacks.get(uuid)
            assert stack, f"{path}: an end without a begin on track {uuid}"
            where, cat, name, begin, begin_args = stack.pop()
            assert ts >= begin, f"{path}: {name!r} ends {begin - ts} ns before it begins"
            begin_args.update(args)
            slices.append([where, cat, name, begin, ts - begin, begin_args])
        elif e.type == TYPE_INSTANT:
            instants.append([where, ",".join(cats), name, ts, args])
        elif e.type == TYPE_COUNTER:
            counters[track.get("name", "")] = counters.get(track.get("name", ""), 0) + 1
            owner = tracks.get(track.get("parent"), {}).get("process_name", "")
            value = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
            counter_values.setdefault(f"{owner}/{track.get('name', '')}", []).append(value)
    return {"pid": pid, "pids": sorted(pids), "process_name": process_name, "threads": threads, "slices": slices,
            "instants": instants, "counters": counters, "counter_values": counter_values, "snapshot": snapshot,
            "primary_clock": primary_clock, "truncated": truncated,
            "open": sum(len(s) for s in stacks.values())}


if __name__ == "__main__":
    print(json.dumps({path: read(path) for path in sys.argv[1:]}))
