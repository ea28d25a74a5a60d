import logging, os
import wfe

logging.basicConfig(level=logging.INFO)  # a line per task
app = wfe.Worker(os.environ.get("WFE_DSN", "dbname=shop"), concurrency=4)

@app.handler("payment.review@1", queue="payments-review")
def review(task: wfe.Task) -> dict:
    if "amount" not in task.input:
        raise wfe.Fail("review.bad_input", "no amount", retryable=False)
    return {"approved": task.input["amount"] < 100000}

app.run()  # each queue in its configured mode: poll, or broker (RabbitMQ)
