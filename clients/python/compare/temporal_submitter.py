import asyncio
import os
import sys

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy


async def main(models: list) -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    for model in models:
        # the workflow id is the idempotency key; an existing run is joined, not started again
        handle = await client.start_workflow("ModelIngest", model, id=f"ingest-{model}", task_queue="model-ingest",
                                             id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        try:
            print(model, await handle.result())
        except WorkflowFailureError as failed:
            print(model, "failed", failed.cause)


asyncio.run(main(sys.argv[1:]))
