"""The load generator: the loadkit code that runs inside a Locust process.

Users, the open-model dispatcher and its arrival times, the latency recorder,
the master/worker record channel, the runtime that ties them to Locust's
events, and the tab in Locust's web UI. Everything here runs under gevent
(`users` and `runtime` import Locust); `loadkit run` never imports it.

The orchestrator (`loadkit.load.orchestrator` and its helpers) and this
package meet only in the modules both import: `loadkit.load.handoff` (the
environment a Locust process is started with, the exit codes it answers
with) and the declarations (`scenario`, `shapes`, `sources`, `protocols`,
`preflight`). The import-linter contracts in `.importlinter` check it.
"""
