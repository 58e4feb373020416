-- Steps from the trace's markers: ProfilerStep#N (kind step, on threads or, for
-- process-wide ranges, async lanes), else ranges named like steps (train_step_3), per
-- source, and each step's device time by class, its work clipped to the step.
step_mark as (
  select s.host, s.rank, t.source, s.name, s.ts as start_ns, s.ts + s.dur as end_ns,
         case when s.kind = 'step' then 1 else 2 end as preference
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where (t.kind = 'thread'
         and (s.kind = 'step'
              or (s.kind in ('annotation', 'op') and {{STEP_NAME}})))
     or (t.kind = 'async' and s.kind = 'step')
),
step as (
  select host, rank, source, name, start_ns, end_ns
  from (select m.*, min(preference) over (partition by host, rank, source) as best
        from step_mark m) ranked
  where preference = best
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
