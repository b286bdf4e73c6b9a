"""Users of one class in a generator process draw from one shared request source.

Locust is imported only in a child process: importing it monkey-patches the
interpreter (gevent), which would change every test after this one.
"""

import json
import subprocess
import sys
import textwrap


def test_a_pool_of_users_draws_one_block_at_a_time_and_the_seeds_values_whatever_its_size():
    code = textwrap.dedent(
        """
        import json
        from types import SimpleNamespace
        from loadkit.load.generator.runtime import LoadRuntime
        from loadkit.load.sources import build_source
        from loadkit.target.requests import ranker_plan

        blocks = []

        def encode(requests):
            blocks.append(len(requests))
            return requests

        class Ranker: pass
        class Other: pass

        runtime = SimpleNamespace(_sources={}, seed=7, worker_split=lambda: (0, 1))
        plan = ranker_plan(1)
        users = [LoadRuntime.request_source(runtime, Ranker, plan, encode) for _ in range(50)]
        other = LoadRuntime.request_source(runtime, Other, plan, encode)
        sent = [users[i % 50].next() for i in range(200)]  # 50 users in turn
        alone = build_source(plan, 7, 0)
        expected = [alone.next() for _ in range(200)]
        same = all(
            (x == y).all() for a, b in zip(sent, expected) for x, y in zip(a.arrays, b.arrays)
        )
        print(json.dumps({
            "sources": len({id(u) for u in users}), "other": other is not users[0],
            "same": same, "blocks": blocks,
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["sources"] == 1 and result["other"]
    assert result["same"]  # the values a single seeded source gives, whatever the pool's size
    # one block drawn per `block` requests (the other class drew none yet), not one per user
    block = result["blocks"][0]
    assert block > 1 and result["blocks"] == [block] * -(-200 // block)
