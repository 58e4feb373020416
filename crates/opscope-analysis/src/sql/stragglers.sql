-- The spread across devices and ranks, and the straggler. Per device (opscope gpu):
-- its busy, computation, other busy and idle time, the straggler computing most. Per
-- rank (opscope steps): its median step, computation, communication and idle time per
-- step, the straggler computing most per step. DataLoader workers are no ranks. The
-- files of one process (a profiler schedule's successive windows, a recorded file
-- beside the program's own profile) are one rank: its steps pooled, its device time
-- summed, else a process would be its own straggler.
--
-- A file's process, as opscope's CLI keys it (`roles::process_key`): its host, the
-- least pid of the system's (below 2^30, where the pids importers make up begin) among
-- its host threads, and its rank. An XSpace's pid is made up, but its host lines are
-- its threads, which one process keeps from one profiling session to the next: it is
-- numbered by the first XSpace of its host and rank that shares a thread with it (the
-- ids from 0xdeadbeef on are xprof's derived lines, in every XSpace), -1 with none. A
-- file that names no host is a process of its own (pids repeat across machines).
host_pid as (
  select host, rank, source, min(pid) as pid from tracks
  where kind = 'thread' and pid < 1073741824
  group by host, rank, source
),
xspace_line as (
  select distinct t.host, t.rank, t.source, t.tid from tracks t
  join metadata m on m.host = t.host and m.rank = t.rank and m.source = t.source
  where m.format = 'xplane' and t.kind = 'thread' and t.device_kind is null
    and t.tid is not null and not (t.tid >= 3735928559 and t.tid < 3735932655)
),
xspace_process as (
  select a.host, a.rank, a.source, -2 - min(b.source) as pid
  from xspace_line a
  join xspace_line b on b.host = a.host and b.rank = a.rank and b.tid = a.tid
  group by a.host, a.rank, a.source
),
keyed_source as (
  select m.host, m.rank, m.source, m.path,
         case when m.host_name is null then null
              when m.format = 'xplane' then coalesce(x.pid, -1)
              else p.pid end as pid
  from metadata m
  left join host_pid p on p.host = m.host and p.rank = m.rank and p.source = m.source
  left join xspace_process x on x.host = m.host and x.rank = m.rank and x.source = m.source
),
-- Each file with its process, numbered by the process's first file, which names it.
process_of as (
  select host, rank, source,
         case when pid is null then source
              else min(source) over (partition by host, rank, pid) end as process
  from keyed_source
),
labelled_source as (
  select p.host, p.rank, p.source, p.process,
         case when p.rank >= 0 then 'rank ' || cast(p.rank as string) else named.path end as label
  from process_of p
  join keyed_source named
    on named.host = p.host and named.rank = p.rank and named.source = p.process
),
dataloader_worker as (
  select distinct host, rank, source from tracks
  where kind = 'thread' and tid = pid and thread_name = 'pt_data_worker'
),
-- A rank with device work in its steps is compared by it, from the files that have it,
-- one without, by its host threads' time (as `opscope steps`).
step_source as (
  select host, rank, source,
         max(case when kernels > 0 or device_busy_ns > 0 then 1 else 0 end) as on_device
  from step_row
  group by host, rank, source
),
step_group as (
  select s.host, s.rank, s.source, ls.process, ls.label, s.on_device,
         max(s.on_device) over (partition by s.host, s.rank, ls.process) as group_on_device
  from step_source s
  join labelled_source ls on ls.host = s.host and ls.rank = s.rank and ls.source = s.source
  left join dataloader_worker w on w.host = s.host and w.rank = s.rank and w.source = s.source
  where w.source is null
),
step_figure_row as (
  select r.host, r.rank, g.process, g.label, g.group_on_device as on_device, r.dur_ns,
         case when g.group_on_device = 1 then r.computation_ns
              else coalesce(h.computation_ns, 0) end as computation_ns,
         case when g.group_on_device = 1 then r.communication_ns
              else coalesce(h.communication_ns, 0) end as communication_ns,
         case when g.group_on_device = 1 then r.device_idle_ns
              else r.dur_ns - coalesce(h.busy_ns, 0) end as idle_ns
  from step_row r
  join step_group g on g.host = r.host and g.rank = r.rank and g.source = r.source
  left join step_host h
    on h.host = r.host and h.rank = r.rank and h.source = r.source
   and h.name = r.name and h.start_ns = r.start_ns
  where g.on_device = g.group_on_device
),
figure as (
  select 'gpu' as summary, d.host, d.rank, ls.process, d.device_index as within_source,
         ls.label || ' ' || d.device_kind || ' ' || cast(d.device_index as string) as label,
         m.metric,
         case m.metric
           when 'busy_ns' then cast(sum(d.busy_ns) as double)
           when 'compute_ns' then cast(sum(d.compute_ns) as double)
           when 'non_compute_ns' then cast(sum(d.busy_ns - d.compute_ns) as double)
           when 'idle_ns' then cast(sum(d.span_ns - d.busy_ns) as double)
           else coalesce(100.0 * cast(sum(d.span_ns - d.busy_ns) as double)
                         / nullif(sum(d.span_ns), 0), 0.0)
         end as value
  from device_time d
  join labelled_source ls on ls.host = d.host and ls.rank = d.rank and ls.source = d.source
  cross join (select 'busy_ns' as metric union all select 'compute_ns'
              union all select 'non_compute_ns' union all select 'idle_ns'
              union all select 'idle_pct') m
  where d.track is null
  group by d.host, d.rank, ls.process, d.device_kind, d.device_index, ls.label, m.metric
  union all
  select 'steps', r.host, r.rank, r.process, 0, r.label,
         case when m.slot = 4 and r.on_device = 0 then 'median_host_idle_ns'
              else m.metric end,
         case m.slot
           when 1 then median(r.dur_ns)
           when 2 then median(r.computation_ns)
           when 3 then median(r.communication_ns)
           else median(r.idle_ns)
         end
  from step_figure_row r
  cross join (select 1 as slot, 'median_step_ns' as metric
              union all select 2, 'median_computation_ns'
              union all select 3, 'median_communication_ns'
              union all select 4, 'median_device_idle_ns') m
  group by r.host, r.rank, r.process, r.label, r.on_device, m.slot, m.metric
),
ordered_figure as (
  select f.*,
         row_number() over (partition by summary, metric
                            order by value, host, rank, process, within_source) as from_least,
         row_number() over (partition by summary, metric
                            order by value desc, host, rank, process, within_source) as from_most,
         count(*) over (partition by summary, metric) as compared
  from figure f
),
spread as (
  select summary, metric, compared,
         min(value) as min, median(value) as median, max(value) as max,
         max(case when from_least = 1 then label end) as least,
         max(case when from_most = 1 then label end) as most
  from ordered_figure
  group by summary, metric, compared
)
select summary, metric, compared, min, median, max, least, most,
       (metric in ('compute_ns', 'median_computation_ns') and max > 0) as straggler,
       case when metric in ('compute_ns', 'median_computation_ns') and max > 0
            then case when median > 0 then 100.0 * cast((max - median) as double) / median else 0.0 end
       end as above_median_pct
from spread
where compared >= 2
order by summary, case metric
  when 'busy_ns' then 1 when 'compute_ns' then 2 when 'non_compute_ns' then 3
  when 'idle_ns' then 4 when 'idle_pct' then 5
  when 'median_step_ns' then 1 when 'median_computation_ns' then 2
  when 'median_communication_ns' then 3 else 4 end
