-- The spread across devices and ranks, and the straggler. Per device (opscope gpu):
-- its busy, computation, other busy and idle time, the straggler computing most. Per
-- rank (opscope steps): its median step, computation, communication and idle time per
-- step, the straggler computing most per step. DataLoader workers are no ranks.
labelled_source as (
  select host, rank, source,
         case when rank >= 0 then 'rank ' || cast(rank as string) else path end as label
  from metadata
),
dataloader_worker as (
  select distinct host, rank, source from tracks
  where kind = 'thread' and tid = pid and thread_name = 'pt_data_worker'
),
figure as (
  select 'gpu' as summary, d.host, d.rank, d.source, d.device_index as within_source,
         ls.label || ' ' || d.device_kind || ' ' || cast(d.device_index as string) as label,
         m.metric,
         case m.metric
           when 'busy_ns' then cast(d.busy_ns as double)
           when 'compute_ns' then cast(d.compute_ns as double)
           when 'non_compute_ns' then cast(d.busy_ns - d.compute_ns as double)
           when 'idle_ns' then cast(d.span_ns - d.busy_ns as double)
           else coalesce(100.0 * cast((d.span_ns - d.busy_ns) as double) / nullif(d.span_ns, 0), 0.0)
         end as value
  from device_time d
  join labelled_source ls on ls.host = d.host and ls.rank = d.rank and ls.source = d.source
  cross join (select 'busy_ns' as metric union all select 'compute_ns'
              union all select 'non_compute_ns' union all select 'idle_ns'
              union all select 'idle_pct') m
  where d.track is null
  union all
  select 'steps', r.host, r.rank, r.source, 0, ls.label, m.metric,
         case m.metric
           when 'median_step_ns' then median(r.dur_ns)
           when 'median_computation_ns' then median(r.computation_ns)
           when 'median_communication_ns' then median(r.communication_ns)
           else median(r.device_idle_ns)
         end
  from step_row r
  join labelled_source ls on ls.host = r.host and ls.rank = r.rank and ls.source = r.source
  cross join (select 'median_step_ns' as metric union all select 'median_computation_ns'
              union all select 'median_communication_ns'
              union all select 'median_device_idle_ns') m
  left join dataloader_worker w on w.host = r.host and w.rank = r.rank and w.source = r.source
  where w.source is null
  group by r.host, r.rank, r.source, ls.label, m.metric
),
ordered_figure as (
  select f.*,
         row_number() over (partition by summary, metric
                            order by value, host, rank, source, within_source) as from_least,
         row_number() over (partition by summary, metric
                            order by value desc, host, rank, source, within_source) as from_most,
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
