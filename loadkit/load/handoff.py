"""The hand-off between `loadkit run` (the orchestrator) and the Locust processes it starts.

The two sides run in different processes and import nothing of each other:
the orchestrator starts `locust -f SCENARIO` with these environment
variables set, and reads back the run directory and the exit status. This
module is that contract, in one place, and the only loadkit module both
sides import for it (docs/architecture.md).

- `LOADKIT_RUN_DIR`: the run directory the Locust process records into;
  unset under plain `locust -f` (then the master or local process creates
  one under `reports/`).
- `LOADKIT_PARAMS`: the `--set` overrides, a JSON object of strings.
- `LOADKIT_DURATION_S`: `--duration`, seconds (unset: the scenario's own).
- `LOADKIT_SEED`: the run's seed (an int).
- `LOADKIT_WORKER_INDEX` / `LOADKIT_WORKER_COUNT`: a worker's share of the
  arrivals (`loadkit worker` sets them; otherwise the master's numbering).
- `LOADKIT_PROCESS_NAME`: the name the process records under (`local`,
  `worker-<i>`).
- `LOADKIT_REQUEST_PLAN`: the pre-flight's `RequestPlan`
  (`loadkit.load.sources.RequestPlan.to_json()`), so no Locust process reads
  the model's metadata again.

A Locust process that cannot write its records exits with
`EXIT_WRITE_FAILED`, which the orchestrator reports as a full disk.
"""

from __future__ import annotations

ENV_RUN_DIR = "LOADKIT_RUN_DIR"
ENV_PARAMS = "LOADKIT_PARAMS"
ENV_DURATION = "LOADKIT_DURATION_S"
ENV_SEED = "LOADKIT_SEED"
ENV_WORKER_INDEX = "LOADKIT_WORKER_INDEX"
ENV_WORKER_COUNT = "LOADKIT_WORKER_COUNT"
ENV_PROCESS = "LOADKIT_PROCESS_NAME"
ENV_REQUEST_PLAN = "LOADKIT_REQUEST_PLAN"  # JSON RequestPlan resolved by the pre-flight

EXIT_WRITE_FAILED = 74  # EX_IOERR: a Locust process could not write its records
