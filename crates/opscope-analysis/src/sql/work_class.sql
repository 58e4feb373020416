-- Each piece of device work's class. A kernel is communication by its name, or when
-- the host call that launched it (by launch flow, else by equal correlation id in its
-- source) ran inside a collective op.
host_call as (
  select s.id, s.track, s.ts, s.ts + s.dur as te, s.kind, s.correlation, t.source
  from slices s
  join tracks t on s.track = t.id
  where t.kind = 'thread'
),
flow_launch as (
  select f.{{TO}} as work, min(f.{{FROM}}) as call
  from flows f
  join host_call h on h.id = f.{{FROM}}
  join device_work w on w.id = f.{{TO}}
  group by f.{{TO}}
),
correlation_launch as (
  select w.id as work, min(h.id) as call
  from device_work w
  join host_call h
    on h.correlation = w.correlation and h.source = w.source
   and h.kind in ('runtime', 'driver')
  left join flow_launch fl on fl.work = w.id
  where fl.work is null
  group by w.id
),
launch as (
  select work, call from flow_launch
  union all
  select work, call from correlation_launch
),
collective_range as (
  select h.track, h.ts, h.te
  from host_call h
  join slices s on s.id = h.id
  where s.kind = 'collective'
     or (s.kind in ('op', 'annotation') and ({{COLLECTIVE_OP_NAME}}))
),
launched_by_collective as (
  select distinct l.work
  from launch l
  join host_call c on c.id = l.call
  join collective_range r on r.track = c.track and r.ts <= c.ts and r.te >= c.te
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
  left join launched_by_collective lc on lc.work = w.id
)
