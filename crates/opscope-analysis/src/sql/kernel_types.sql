-- opscope gpu's kernel breakdown by type (HTA's): per source and device, the exclusive
-- time of each combination of computation, communication and memory work running.
select host, rank, source, device, work_running, sum(seg_ns) as time_ns,
       100.0 * cast(sum(seg_ns) as double)
         / sum(sum(seg_ns)) over (partition by host, rank, source, device) as pct
from (
  select host, rank, source, device_index,
         device_kind || ' ' || cast(device_index as string) as device,
         concat_ws(' + ',
           case when n_comp > 0 then 'computation' end,
           case when n_comm > 0 then 'communication' end,
           case when n_mem > 0 then 'memory' end) as work_running,
         seg_ns
  from segment
  where track is null and n_comp + n_comm + n_mem > 0 and seg_ns > 0
) running
group by host, rank, source, device_index, device, work_running
order by host, rank, source, device_index, time_ns desc, work_running
