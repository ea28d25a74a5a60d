"""A worker for examples/payment-routing.yaml and examples/system-initialization.yaml.

The first review of a high-value payment fails (wfe retries it after a
backoff); the configuration fetch fails for good (a non-critical task: the
run goes on); everything else succeeds.  WFE_DSN
configures it; WFE_ONCE=1 makes it exit when nothing is left to do.
"""
import os

import wfe

app = wfe.Worker(os.environ.get("WFE_DSN", "dbname=shop"), concurrency=4,
                 worker_id=os.environ.get("WFE_WORKER_ID"))


@app.handler("payment.review@1", queue="payments-review")
def review(task: wfe.Task) -> dict:
    if task.attempt == 1:
        raise wfe.Fail("review.busy", "the review desk is busy")
    return {"approved": task.input["amount"] < 100000}


@app.handler("payment.process@1", queue="payments")
def process(task: wfe.Task) -> dict:
    return {"charged": task.input["amount"], "account": task.input["account"]}


@app.handler("storage.verify@1", queue="init")
@app.handler("profile.hydrate@1", queue="init")
def ok(task: wfe.Task) -> dict:
    return {"ok": True}


@app.handler("config.fetch@1", queue="init")
def fetch_configuration(task: wfe.Task) -> dict:
    # the configuration server is down: trying again cannot help, and the task is not critical
    raise wfe.Fail("config.unreachable", "configuration server unreachable", retryable=False)


@app.handler("session.restore@1", queue="init")
def restore_session(task: wfe.Task) -> dict:
    return {"user_session": {"user": "ada"}}


if __name__ == "__main__":
    app.run(once=os.environ.get("WFE_ONCE") == "1")  # each queue in its configured mode
