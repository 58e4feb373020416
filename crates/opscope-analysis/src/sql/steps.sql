-- opscope steps: each step the trace marks, with the time within it in which device
-- work ran, idle time, device time per class (overlaps count in each) and the pieces
-- of device work that started in it.
select host, rank, source, name, start_ns, dur_ns, device_busy_ns, device_idle_ns,
       computation_ns, communication_ns, memory_ns, kernels
from step_row
order by host, rank, source, start_ns, name
