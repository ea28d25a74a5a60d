from hatchet_sdk import Context, Hatchet, ParentCondition
from pydantic import BaseModel

hatchet = Hatchet()


class Ingest(BaseModel):
    modelId: str


wf = hatchet.workflow(name="model-ingest", input_validator=Ingest)


@wf.task()
def cache_lookup(input: Ingest, ctx: Context) -> dict:
    return {"hit": input.modelId[-1] in "02468"}


hit = ParentCondition(parent=cache_lookup, expression="output.hit")


@wf.task(parents=[cache_lookup], skip_if=[hit])
def render_thumbnail(input: Ingest, ctx: Context) -> dict:
    return {"by": "thumbnail.render", "model": input.modelId}


@wf.task(parents=[cache_lookup, render_thumbnail], skip_if=[hit])
def semantic_analysis(input: Ingest, ctx: Context) -> dict:
    return {"by": "semantic.analyse", "model": input.modelId}


@wf.task(parents=[cache_lookup, render_thumbnail], skip_if=[hit])
def technical_metadata(input: Ingest, ctx: Context) -> dict:
    return {"by": "metadata.extract", "model": input.modelId}


@wf.task(parents=[cache_lookup, semantic_analysis, technical_metadata])
def publish(input: Ingest, ctx: Context) -> dict:
    return {"ok": True}


@wf.on_success_task()
def audit(input: Ingest, ctx: Context) -> dict:
    return {"ok": True}


@wf.on_failure_task()
def audit_failure(input: Ingest, ctx: Context) -> dict:
    return {"ok": True}


if __name__ == "__main__":
    hatchet.worker("model-ingest-worker", workflows=[wf]).start()
