-- Device work: kernels, copies and sets on GPU streams. Ids are unique within a
-- partition (host, rank): datasets converted apart and read together stay apart.
device_work as (
  select s.host, s.rank, s.id, s.ts, s.ts + s.dur as te, s.kind, lower(s.name) as lname,
         s.correlation, t.id as track, t.source,
         t.device_kind, t.device_index, t.tid, t.thread_name
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where t.kind = 'gpu_stream'
    and (s.kind = 'kernel' or s.kind = 'memset' or s.kind like 'memcpy%')
)
