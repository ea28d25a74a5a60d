import asyncio
import os
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def cache_lookup(model_id: str) -> dict:
    return {"hit": model_id[-1] in "02468"}


@activity.defn
async def derive(contract: str, model_id: str) -> dict:
    return {"by": contract, "model": model_id}


@activity.defn
async def record(contract: str, model_id: str) -> dict:
    return {"ok": True}


@workflow.defn
class ModelIngest:
    @workflow.run
    async def run(self, model_id: str) -> str:
        timeout = timedelta(minutes=5)
        try:
            found = await workflow.execute_activity(cache_lookup, model_id, start_to_close_timeout=timeout)
            if not found["hit"]:
                await workflow.execute_activity(derive, args=["thumbnail.render", model_id],
                                                start_to_close_timeout=timeout)
                await asyncio.gather(*(workflow.execute_activity(derive, args=[c, model_id],
                                                                 start_to_close_timeout=timeout)
                                       for c in ("semantic.analyse", "metadata.extract")))
            await workflow.execute_activity(record, args=["catalogue.publish", model_id],
                                            start_to_close_timeout=timeout)
            return "completed"
        finally:
            await workflow.execute_activity(record, args=["audit.run-terminal", model_id],
                                            start_to_close_timeout=timeout)


async def main() -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    worker = Worker(client, task_queue="model-ingest", workflows=[ModelIngest],
                    activities=[cache_lookup, derive, record])
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
