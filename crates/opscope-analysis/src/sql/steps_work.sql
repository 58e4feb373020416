-- Steps from the trace's markers: ProfilerStep#N (kind step, on threads or, for
-- process-wide ranges, async lanes), else ranges named like steps (train_step_3), else
-- user ranges named a step with no number (train_step), per source, and each step's
-- device time by class, its work clipped to the step. A marker whose number is an
-- integer arg (TSL's `step_num`: JAX's `StepTraceAnnotation("train", step_num=3)`) is
-- named with it, `train#3`, unless its name ends in a digit (`markers::bounds_of`).
step_mark as (
  select s.host, s.rank, t.source, s.id,
         case when right(s.name, 1) not between '0' and '9'
                   and regexp_extract(coalesce(s.args, ''), {{STEP_NUM_ARG}}, 2) <> ''
              then s.name || '#' || regexp_extract(s.args, {{STEP_NUM_ARG}}, 2)
              else s.name end as name,
         s.ts as start_ns, s.ts + s.dur as end_ns,
         case when s.kind = 'step' then 1
              when s.kind in ('annotation', 'op') and {{STEP_NAME}} then 2
              else 3 end as preference
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where (t.kind = 'thread'
         and (s.kind = 'step'
              or (s.kind in ('annotation', 'op') and {{STEP_NAME}})
              or (s.kind in ('annotation', 'op') and {{BARE_STEP_NAME}})))
     or (t.kind = 'async' and s.kind = 'step')
),
step_marked as (
  select host, rank, source, id, name, start_ns, end_ns,
         row_number() over (partition by host, rank, source order by start_ns desc, id desc) as from_last,
         count(*) over (partition by host, rank, source) as markers
  from (select m.*, min(preference) over (partition by host, rank, source) as best
        from step_mark m) ranked
  where preference = best
),
-- The step a profiler's last `step()` opens and its stop closes holds nothing of a
-- step (nothing at all, or the loop's head finding the data exhausted): the last
-- marker is dropped when it holds nothing and the one before holds something, or, with
-- three markers or more, when what it holds (the names of the slices right inside it,
-- as multisets) is less than 0.75 alike to each of the three before it.
step_last as (
  select host, rank, source, id, from_last, markers from step_marked where from_last <= 4
),
step_child as (
  select st.host, st.rank, st.source, st.markers, c.name,
         sum(case when st.from_last = 1 then 1 else 0 end) as n1,
         sum(case when st.from_last = 2 then 1 else 0 end) as n2,
         sum(case when st.from_last = 3 then 1 else 0 end) as n3,
         sum(case when st.from_last = 4 then 1 else 0 end) as n4
  from (select host, rank, parent, name from slices
        where parent in (select id from step_last)) c
  join step_last st on c.host = st.host and c.rank = st.rank and c.parent = st.id
  group by st.host, st.rank, st.source, st.markers, c.name
),
step_alike as (
  select host, rank, source, markers, sum(n1) as h1, sum(n2) as h2, sum(n3) as h3, sum(n4) as h4,
         sum(least(n1, n2)) as s2, sum(least(n1, n3)) as s3, sum(least(n1, n4)) as s4
  from step_child
  group by host, rank, source, markers
),
step_dropped as (
  select l.host, l.rank, l.source, l.id
  from step_last l
  join step_alike a on a.host = l.host and a.rank = l.rank and a.source = l.source
  where l.from_last = 1
    and ((a.h1 = 0 and a.h2 > 0)
         or (a.markers >= 3
             and greatest(case when greatest(a.h1, a.h2) = 0 then 1.0
                               else cast(a.s2 as double) / greatest(a.h1, a.h2) end,
                          case when greatest(a.h1, a.h3) = 0 then 1.0
                               else cast(a.s3 as double) / greatest(a.h1, a.h3) end,
                          case when a.markers < 4 then 0.0
                               when greatest(a.h1, a.h4) = 0 then 1.0
                               else cast(a.s4 as double) / greatest(a.h1, a.h4) end) < 0.75))
),
step as (
  select st.host, st.rank, st.source, st.name, st.start_ns, st.end_ns
  from step_marked st
  left join step_dropped d on d.host = st.host and d.rank = st.rank and d.source = st.source and d.id = st.id
  where d.id is null
),
step_work as (
  select st.host, st.rank, st.source, st.name, st.start_ns, w.ts,
         case when w.kind <> 'kernel' then 'memory'
              when {{COMMUNICATION_NAME}} then 'communication'
              else 'computation' end as work_class,
         greatest(w.ts, st.start_ns) as a, least(w.te, st.end_ns) as b
  from step st
  join device_work w
    on w.host = st.host and w.rank = st.rank and w.source = st.source
   and w.ts < st.end_ns
   and (w.te > st.start_ns or w.ts >= st.start_ns)
),
step_span as (
  select host, rank, source, name, start_ns, work_class, a, b,
         max(b) over (partition by host, rank, source, name, start_ns, work_class
                      order by a, b rows between unbounded preceding and 1 preceding) as class_reached,
         max(b) over (partition by host, rank, source, name, start_ns
                      order by a, b rows between unbounded preceding and 1 preceding) as any_reached
  from step_work
  where a < b
),
step_time as (
  select host, rank, source, name, start_ns,
         sum(greatest(0, b - greatest(a, coalesce(any_reached, a)))) as busy_ns,
         sum(case when work_class = 'computation'
                  then greatest(0, b - greatest(a, coalesce(class_reached, a))) else 0 end) as computation_ns,
         sum(case when work_class = 'communication'
                  then greatest(0, b - greatest(a, coalesce(class_reached, a))) else 0 end) as communication_ns,
         sum(case when work_class = 'memory'
                  then greatest(0, b - greatest(a, coalesce(class_reached, a))) else 0 end) as memory_ns
  from step_span
  group by host, rank, source, name, start_ns
),
step_count as (
  select host, rank, source, name, start_ns, count(*) as kernels
  from step_work
  where ts >= start_ns
  group by host, rank, source, name, start_ns
),
step_row as (
  select st.host, st.rank, st.source, st.name, st.start_ns, st.end_ns - st.start_ns as dur_ns,
         coalesce(tm.busy_ns, 0) as device_busy_ns,
         st.end_ns - st.start_ns - coalesce(tm.busy_ns, 0) as device_idle_ns,
         coalesce(tm.computation_ns, 0) as computation_ns,
         coalesce(tm.communication_ns, 0) as communication_ns,
         coalesce(tm.memory_ns, 0) as memory_ns,
         coalesce(c.kernels, 0) as kernels
  from step st
  left join step_time tm
    on tm.host = st.host and tm.rank = st.rank and tm.source = st.source
   and tm.name = st.name and tm.start_ns = st.start_ns
  left join step_count c
    on c.host = st.host and c.rank = st.rank and c.source = st.source
   and c.name = st.name and c.start_ns = st.start_ns
)
