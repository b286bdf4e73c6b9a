"""Production telemetry from a Prometheus server: exporter families, the HTTP API, the rows.

- `families`: one registry entry per exporter (Triton, DCGM, node-exporter, ...):
  which metrics it exposes, which run-directory series and field each fills, in
  which unit. Adding an exporter is adding one entry.
- `client`: the `/api/v1/query_range` client (chunking, auth, errors).
- `window`: a window of Prometheus pulled through the families into rows.
"""
