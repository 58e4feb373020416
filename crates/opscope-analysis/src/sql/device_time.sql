-- The device time line of each source and device (track null) and of each stream
-- (track set): every class's work merged into islands, then swept from edge to edge,
-- so that each segment knows which classes run in it.
leveled_work as (
  select host, rank, source, device_kind, device_index, cast(null as bigint) as track,
         work_class, ts, te
  from classed_work
  union all
  select host, rank, source, device_kind, device_index, cast(track as bigint) as track,
         work_class, ts, te
  from classed_work
),
reach as (
  select l.*,
         max(te) over (
           partition by host, rank, source, device_kind, device_index, track, work_class
           order by ts, te rows between unbounded preceding and 1 preceding
         ) as reached
  from leveled_work l
),
numbered as (
  select r.*,
         sum(case when reached is null or ts > reached then 1 else 0 end) over (
           partition by host, rank, source, device_kind, device_index, track, work_class
           order by ts, te rows between unbounded preceding and current row
         ) as island
  from reach r
),
island as (
  select host, rank, source, device_kind, device_index, track, work_class,
         min(ts) as ts, max(te) as te
  from numbered
  group by host, rank, source, device_kind, device_index, track, work_class, island
),
edge as (
  select host, rank, source, device_kind, device_index, track, ts as edge_ns,
         case when work_class = 'computation' then 1 else 0 end as d_comp,
         case when work_class = 'communication' then 1 else 0 end as d_comm,
         case when work_class = 'memory' then 1 else 0 end as d_mem
  from island
  union all
  select host, rank, source, device_kind, device_index, track, te as edge_ns,
         case when work_class = 'computation' then -1 else 0 end,
         case when work_class = 'communication' then -1 else 0 end,
         case when work_class = 'memory' then -1 else 0 end
  from island
),
edge_sum as (
  select host, rank, source, device_kind, device_index, track, edge_ns,
         sum(d_comp) as d_comp, sum(d_comm) as d_comm, sum(d_mem) as d_mem
  from edge
  group by host, rank, source, device_kind, device_index, track, edge_ns
),
segment as (
  select host, rank, source, device_kind, device_index, track, edge_ns,
         sum(d_comp) over (
           partition by host, rank, source, device_kind, device_index, track
           order by edge_ns rows between unbounded preceding and current row
         ) as n_comp,
         sum(d_comm) over (
           partition by host, rank, source, device_kind, device_index, track
           order by edge_ns rows between unbounded preceding and current row
         ) as n_comm,
         sum(d_mem) over (
           partition by host, rank, source, device_kind, device_index, track
           order by edge_ns rows between unbounded preceding and current row
         ) as n_mem,
         lead(edge_ns) over (
           partition by host, rank, source, device_kind, device_index, track order by edge_ns
         ) - edge_ns as seg_ns
  from edge_sum
),
device_time as (
  select host, rank, source, device_kind, device_index, track,
         max(edge_ns) - min(edge_ns) as span_ns,
         sum(case when n_comp + n_comm + n_mem > 0 then seg_ns else 0 end) as busy_ns,
         sum(case when n_comp > 0 then seg_ns else 0 end) as compute_ns,
         sum(case when n_comm > 0 then seg_ns else 0 end) as communication_ns,
         sum(case when n_comp > 0 and n_comm > 0 then seg_ns else 0 end) as overlapped_ns
  from segment
  group by host, rank, source, device_kind, device_index, track
)
