"""Fault injectors for the demo, tests and the diagnosis benchmark.

One module per injector, each a `ScheduledFault` (start()/stop(), context
manager) that follows a seeded `FaultSchedule` in a background thread and
logs every real start and end as ground truth (`fault` events) in the run
directory:

- `stall.ProcessStall`: SIGSTOP/SIGCONT of a process (event `stall`)
- `cpu_burn.CpuBurn`: busy-loop processes (event `cpu-burn`)
- `cgroup_quota.CgroupQuota`: a real CFS quota on the target's cgroup (event `cgroup-quota`)
- `model_slowdown.ModelSlowdown`: the embedded ranker takes `factor` times longer
  (event `model-slowdown`; no GPU, CPU or cgroup signal)
- `payload.LargePayload`: requests carry a large payload the model ignores (event
  `data-movement`; the load generator reads its state file with `payload.PayloadState`)
- `thermal.ThermalFault`: the simulated GPU's cooling fault (events `cooling-fault`,
  `thermal-throttle`, written by the simulator itself) or power cap (event `power-cap`)
- `neighbour_model.NeighbourModel`: another model's traffic on the same server (event
  `neighbour-model`; a sender process of its own)
- `slow_path.SlowPath`: a TCP proxy in front of the server that holds each request
  (event `slow-path`)

Traffic-shaped faults (bursts, churn, a batching window too long for the
load) are not injectors: they are load or server settings (see
bench/diagnosis/).
"""

from loadkit.faults.cgroup_quota import CgroupQuota, locate_cpu_cgroup
from loadkit.faults.cpu_burn import CpuBurn
from loadkit.faults.model_slowdown import ModelSlowdown
from loadkit.faults.neighbour_model import NeighbourModel
from loadkit.faults.payload import LargePayload, PayloadState
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable, FaultWindow, ScheduledFault
from loadkit.faults.slow_path import SlowPath
from loadkit.faults.stall import ProcessStall
from loadkit.faults.thermal import ThermalFault

__all__ = [
    "CgroupQuota",
    "CpuBurn",
    "ModelSlowdown",
    "NeighbourModel",
    "FaultSchedule",
    "FaultUnavailable",
    "FaultWindow",
    "LargePayload",
    "PayloadState",
    "ProcessStall",
    "ScheduledFault",
    "SlowPath",
    "ThermalFault",
    "locate_cpu_cgroup",
]
