import os, wfe

app = wfe.Worker(os.environ.get("WFE_DSN", "dbname=shop"), concurrency=8)

@app.handler("cache.lookup@1", queue="actions")
def cache_lookup(task):  # model ids ending in an even digit are cached
    return {"hit": task.input["modelId"][-1] in "02468"}

@app.handler("thumbnail.render@3", queue="rendering")
@app.handler("semantic.analyse@4", queue="analysis")
@app.handler("metadata.extract@2", queue="metadata")
def derive(task):
    return {"by": task.contract, "model": task.input["modelId"]}

@app.handler("catalogue.publish@2", queue="actions")
@app.handler("audit.run-terminal@1", queue="actions")
def record(task):
    return {"ok": True}

app.run()  # each queue in the mode wfe.configure_queue gave it
