import os, sys, wfe

DSN = os.environ.get("WFE_DSN", "dbname=shop")

for model in sys.argv[1:]:
    # a new connection and transaction per try, the same idempotency key: the run exists once
    run = wfe.submit(DSN, "model-ingest", {"modelId": model}, idempotency_key=f"ingest-{model}", retry=True)
    try:
        print(model, run.result(timeout=600)["state"])  # one LISTEN connection, kept across restarts
    except wfe.RunFailed as failed:
        print(model, failed.report["state"], failed.report.get("reason"))
