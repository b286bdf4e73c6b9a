"""Bare Locust, the reference for the generator benchmark: FastHttpUser posting a fixed body.

    locust -f bench/locust_bare.py --headless -u 20 -r 20 -t 12s --host http://127.0.0.1:PORT

No loadkit recording, no per-request payload generation: the least work
Locust can do per request. The body is the same KServe v2 JSON (one
candidate) that loadkit's JSON user sends in the benchmark.

With `LOADKIT_BARE_RATE=N` (requests/s, all users together) each user paces
itself with Locust's own `constant_throughput`: how a Locust user holds a rate,
to compare with loadkit's open model at the same rate.
"""

import json
import os

from locust import FastHttpUser, constant, constant_throughput, task

from loadkit.load.sources import build_source
from loadkit.load.transports import kserve_v2_json
from loadkit.target.requests import ranker_plan

BODY = json.dumps(kserve_v2_json(build_source(ranker_plan(1), seed=0).next()))  # = bare_body()
HEADERS = {"Content-Type": "application/json"}
RATE = float(os.environ.get("LOADKIT_BARE_RATE", "0"))
USERS = int(os.environ.get("LOADKIT_BARE_USERS", "20"))


class Bare(FastHttpUser):
    wait_time = constant_throughput(RATE / USERS) if RATE > 0 else constant(0)

    @task
    def post(self) -> None:
        self.client.post("/", data=BODY, headers=HEADERS)
