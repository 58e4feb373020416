-- opscope stats kernel: per kernel name over every GPU stream of the dataset, its
-- instances and GPU time (total, mean, median, min, max, sample standard deviation)
-- and its share of all kernel time (Nsight Systems' cuda_gpu_kern_sum).
kernel_row as (
  select s.name,
         sum(s.dur) as total_ns,
         count(*) as instances,
         avg(cast(s.dur as double)) as mean_ns,
         median(s.dur) as median_ns,
         min(s.dur) as min_ns,
         max(s.dur) as max_ns,
         coalesce(stddev_samp(s.dur), 0.0) as stddev_ns
  from slices s
  join tracks t on s.host = t.host and s.rank = t.rank and s.track = t.id
  where t.kind = 'gpu_stream' and s.kind = 'kernel'
  group by s.name
)
select 100.0 * cast(total_ns as double) / sum(total_ns) over () as time_pct,
       total_ns, instances, mean_ns, median_ns, min_ns, max_ns, stddev_ns, name
from kernel_row
order by total_ns desc, name
