"""`loadkit oncall`: Alertmanager's webhook in, an incident report (and a summary posted) out.

- `payload`: Alertmanager's webhook payload (version 4) as dataclasses, checked;
- `incidents`: one incident per Alertmanager group (`groupKey`), its state on disk
  (`incident.json`, written atomically), the window an alert asks for, the store
  and its disk budget;
- `notify`: the receivers a summary is posted to (a registry of formats: `json`,
  `slack`), retried with backoff, each delivery's state kept in the incident;
- `worker`: the queue of pending incidents (coalesced by group) and the one
  analysis at a time, each in a child process with a deadline;
- `job`: that child: the window imported from Prometheus, analyzed, reported;
- `service` and `server`: what a notification does, and the HTTP side
  (`POST /alertmanager`, the index at `/`, the reports).

docs/oncall.md ("Reports waiting when the page comes") describes it for users.
"""
