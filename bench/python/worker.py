"""The Python client's poll worker as bench/python/run.sh runs it.

WORK=inproc: the handler returns its input (the client's own ceiling);
WORK=command: it runs the same command wfe-worker runs (`cat`, input on
stdin, result from stdout), for a like-for-like comparison.  CONCURRENCY,
BATCH (1: batched reports, 0: one call each), QUEUE, CONTRACT, WFE_DSN.
"""
import json
import os
import subprocess

import wfe

env = os.environ.get
app = wfe.Worker(env("WFE_DSN", ""), concurrency=int(env("CONCURRENCY", "8")), batch_reports=env("BATCH", "1") == "1",
                 worker_id="bench-python")


@app.handler(env("CONTRACT", "bench.work@1"), queue=env("QUEUE", "bench"))
def work(task: wfe.Task) -> object:
    if env("WORK") == "command":
        out = subprocess.run(["/bin/sh", "-c", "cat"], input=json.dumps(task.input).encode(),
                             stdout=subprocess.PIPE, check=True).stdout
        return json.loads(out)
    return task.input


app.run(once=True)
