-- The host time of each marked step (`host::HostSets`), by which runs without device
-- work are compared: on each thread, communication is the time under a collective and
-- computation the time under other host work outside any collective, each merged over
-- the source's threads and clipped to the step. Host work is ops, ranges, runtime and
-- driver calls, syncs, compilation and collectives; not step markers (they span the
-- step) or the marks of opscope's recorder (category `opscope`).
host_slice as (
  select s.host, s.rank, t.source, s.track, s.ts, s.ts + s.dur as te,
         case when s.kind = 'collective' then 1 else 0 end as talk
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where t.kind = 'thread' and s.dur > 0
    and s.kind in ('op', 'annotation', 'runtime', 'driver', 'sync', 'compile', 'collective')
    and coalesce(s.category, '') <> 'opscope'
    and not {{STEP_NAME}}
    and not (s.kind in ('annotation', 'op') and {{BARE_STEP_NAME}})
),
-- Each thread swept from edge to edge: how many slices of work and of collectives are
-- open after each.
thread_edge as (
  select host, rank, source, track, t, sum(dwork) as dwork, sum(dtalk) as dtalk
  from (select host, rank, source, track, ts as t, 1 - talk as dwork, talk as dtalk
        from host_slice
        union all
        select host, rank, source, track, te, talk - 1, 0 - talk
        from host_slice) e
  group by host, rank, source, track, t
),
thread_state as (
  select host, rank, source, track, t,
         lead(t) over (partition by host, rank, source, track order by t) as t_next,
         sum(dwork) over (partition by host, rank, source, track order by t
                          rows between unbounded preceding and current row) as working,
         sum(dtalk) over (partition by host, rank, source, track order by t
                          rows between unbounded preceding and current row) as talking
  from thread_edge
),
-- Where each thread computes (class 1) or communicates (class 2).
thread_time as (
  select host, rank, source, t as ts, t_next as te,
         case when talking > 0 then 2 else 1 end as class
  from thread_state
  where t_next is not null and (working > 0 or talking > 0)
),
-- The source's threads together, swept the same way.
host_edge as (
  select host, rank, source, t, sum(dcomp) as dcomp, sum(dcomm) as dcomm
  from (select host, rank, source, ts as t,
               case when class = 1 then 1 else 0 end as dcomp,
               case when class = 2 then 1 else 0 end as dcomm
        from thread_time
        union all
        select host, rank, source, te,
               case when class = 1 then -1 else 0 end,
               case when class = 2 then -1 else 0 end
        from thread_time) e
  group by host, rank, source, t
),
host_state as (
  select host, rank, source, t as ts,
         lead(t) over (partition by host, rank, source order by t) as te,
         sum(dcomp) over (partition by host, rank, source order by t
                          rows between unbounded preceding and current row) as computing,
         sum(dcomm) over (partition by host, rank, source order by t
                          rows between unbounded preceding and current row) as communicating
  from host_edge
),
step_host as (
  select st.host, st.rank, st.source, st.name, st.start_ns,
         sum(case when h.computing > 0
                  then least(h.te, st.end_ns) - greatest(h.ts, st.start_ns) else 0 end) as computation_ns,
         sum(case when h.communicating > 0
                  then least(h.te, st.end_ns) - greatest(h.ts, st.start_ns) else 0 end) as communication_ns,
         sum(case when h.computing > 0 or h.communicating > 0
                  then least(h.te, st.end_ns) - greatest(h.ts, st.start_ns) else 0 end) as busy_ns
  from step st
  join host_state h
    on h.host = st.host and h.rank = st.rank and h.source = st.source
   and h.te is not null and h.ts < st.end_ns and h.te > st.start_ns
  group by st.host, st.rank, st.source, st.name, st.start_ns
)
