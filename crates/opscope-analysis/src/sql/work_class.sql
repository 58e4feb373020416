-- Each piece of device work's class. A kernel is communication by its name, or when
-- the host call that launched it (by launch flow, else by equal correlation id in its
-- source) ran inside a collective op.
host_call as (
  select s.host, s.rank, s.id, s.track, s.ts, s.ts + s.dur as te, s.kind, s.name,
         s.correlation, t.source
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where t.kind = 'thread'
),
flow_launch as (
  select f.host, f.rank, f.{{TO}} as work, min(f.{{FROM}}) as call
  from flows f
  join host_call h on h.host = f.host and h.rank = f.rank and h.id = f.{{FROM}}
  join device_work w on w.host = f.host and w.rank = f.rank and w.id = f.{{TO}}
  group by f.host, f.rank, f.{{TO}}
),
correlation_launch as (
  select w.host, w.rank, w.id as work, min(h.id) as call
  from device_work w
  join host_call h
    on h.host = w.host and h.rank = w.rank and h.source = w.source
   and h.correlation = w.correlation and h.kind in ('runtime', 'driver')
  left join flow_launch fl on fl.host = w.host and fl.rank = w.rank and fl.work = w.id
  where fl.work is null
  group by w.host, w.rank, w.id
),
launch as (
  select host, rank, work, call from flow_launch
  union all
  select host, rank, work, call from correlation_launch
),
collective_range as (
  select s.host, s.rank, s.track, s.ts, s.te
  from host_call s
  where s.kind = 'collective'
     or (s.kind in ('op', 'annotation') and ({{COLLECTIVE_OP_NAME}}))
),
launched_by_collective as (
  select distinct l.host, l.rank, l.work
  from launch l
  join host_call c on c.host = l.host and c.rank = l.rank and c.id = l.call
  join collective_range r
    on r.host = c.host and r.rank = c.rank and r.track = c.track
   and r.ts <= c.ts and r.te >= c.te
),
classed_work as (
  select w.*,
         case
           when w.kind <> 'kernel' then 'memory'
           when {{COMMUNICATION_NAME}} then 'communication'
           when lc.work is not null then 'communication'
           else 'computation'
         end as work_class
  from device_work w
  left join launched_by_collective lc
    on lc.host = w.host and lc.rank = w.rank and lc.work = w.id
)
