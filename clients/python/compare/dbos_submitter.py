import os
import sys

from dbos import DBOSClient, EnqueueOptions

client = DBOSClient(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])

for model in sys.argv[1:]:
    # the workflow id is the idempotency key: enqueued again, it finds the same workflow
    options: EnqueueOptions = {"workflow_name": "model_ingest", "queue_name": "model-ingest",
                               "workflow_id": f"ingest-{model}"}
    handle = client.enqueue(options, model)
    try:
        print(model, handle.get_result())
    except Exception as failed:
        print(model, "failed", failed)
