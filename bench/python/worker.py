"""The Python client's poll worker as bench/python/run.sh runs it.

WORK=inproc: the handler returns its input (the client's own ceiling);
WORK=command: it runs the same command wfe-worker runs (`cat`, input on
stdin, result from stdout), for a like-for-like comparison; ASYNC=1: the
same two as `async def` handlers (the command through
asyncio.create_subprocess_exec).  CONCURRENCY, BATCH (1: batched reports,
0: one call each), QUEUE, CONTRACT, WFE_DSN.
"""
import asyncio
import json
import os
import subprocess

import wfe

env = os.environ.get
app = wfe.Worker(env("WFE_DSN", ""), concurrency=int(env("CONCURRENCY", "8")), batch_reports=env("BATCH", "1") == "1",
                 worker_id="bench-python")


def work(task: wfe.Task) -> object:
    if env("WORK") == "command":
        out = subprocess.run(["/bin/sh", "-c", "cat"], input=json.dumps(task.input).encode(),
                             stdout=subprocess.PIPE, check=True).stdout
        return json.loads(out)
    return task.input


async def awork(task: wfe.Task) -> object:
    if env("WORK") == "command":
        proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", "cat", stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE)
        out, _ = await proc.communicate(json.dumps(task.input).encode())
        return json.loads(out)
    return task.input


app.register(env("CONTRACT", "bench.work@1"), awork if env("ASYNC") == "1" else work, queue=env("QUEUE", "bench"))


app.run(once=True)
