-- opscope gpu: per source and device (stream null), HTA's temporal breakdown of the
-- device time line, and per stream (stream set) its busy time and pieces of work.
select d.host, d.rank, d.source,
       d.device_kind || ' ' || cast(d.device_index as string) as device,
       case when d.track is null then null
            else coalesce(trim(t.thread_name), cast(t.tid as string)) end as stream,
       case when d.track is null then null
            else coalesce(cast(nullif(regexp_extract(lower(t.thread_name),
                                      'stream[ :#]*([0-9]+)', 1), '') as bigint),
                          t.tid) end as stream_id,
       n.work,
       d.span_ns, d.busy_ns, d.span_ns - d.busy_ns as idle_ns,
       d.compute_ns, d.busy_ns - d.compute_ns as non_compute_ns,
       100.0 * cast((d.span_ns - d.busy_ns) as double) / nullif(d.span_ns, 0) as idle_pct,
       100.0 * cast(d.compute_ns as double) / nullif(d.span_ns, 0) as compute_pct,
       100.0 * cast((d.busy_ns - d.compute_ns) as double) / nullif(d.span_ns, 0) as non_compute_pct,
       100.0 * cast(d.overlapped_ns as double) / nullif(d.communication_ns, 0) as communication_overlap_pct
from device_time d
left join tracks t on t.host = d.host and t.rank = d.rank and t.id = d.track
join (
  select host, rank, source, device_kind, device_index, cast(null as bigint) as track,
         count(*) as work
  from classed_work group by host, rank, source, device_kind, device_index
  union all
  select host, rank, source, device_kind, device_index, cast(track as bigint), count(*)
  from classed_work group by host, rank, source, device_kind, device_index, track
) n on n.host = d.host and n.rank = d.rank and n.source = d.source
   and coalesce(n.device_kind, '') = coalesce(d.device_kind, '')
   and coalesce(n.device_index, -1) = coalesce(d.device_index, -1)
   and coalesce(n.track, -1) = coalesce(d.track, -1)
order by d.host, d.rank, d.source, d.device_index, d.track nulls first
