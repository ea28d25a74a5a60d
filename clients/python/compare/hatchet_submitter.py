import sys

from hatchet_sdk import Hatchet
from hatchet_sdk.clients.admin import TriggerWorkflowOptions

from hatchet_worker import Ingest, wf

hatchet = Hatchet()

for model in sys.argv[1:]:
    # no run-level idempotency key in the docs we read: the business key goes in the metadata
    ref = wf.run_no_wait(Ingest(modelId=model), options=TriggerWorkflowOptions(additional_metadata={"key": model}))
    try:
        print(model, ref.result())
    except Exception as failed:
        print(model, "failed", failed)
