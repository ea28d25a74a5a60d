import os
import threading

from dbos import DBOS, DBOSConfig, Queue

queue = Queue("model-ingest")


@DBOS.step()
def cache_lookup(model_id: str) -> dict:
    return {"hit": model_id[-1] in "02468"}


@DBOS.workflow()
def derive(contract: str, model_id: str) -> dict:
    return {"by": contract, "model": model_id}


@DBOS.step()
def record(contract: str, model_id: str) -> dict:
    return {"ok": True}


@DBOS.workflow()
def model_ingest(model_id: str) -> str:
    try:
        if not cache_lookup(model_id)["hit"]:
            derive("thumbnail.render", model_id)
            fork = [queue.enqueue(derive, c, model_id) for c in ("semantic.analyse", "metadata.extract")]
            for handle in fork:
                handle.get_result()
        record("catalogue.publish", model_id)
        return "completed"
    finally:
        record("audit.run-terminal", model_id)


if __name__ == "__main__":
    config: DBOSConfig = {"name": "model-ingest", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"]}
    DBOS(config=config)
    DBOS.launch()
    threading.Event().wait()
