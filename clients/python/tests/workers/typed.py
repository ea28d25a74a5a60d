"""A test worker with typed handlers: a dataclass one (CONTRACTS' first) and a pydantic one (the second, when
pydantic is importable).  The stage input is {"spec": {amount, account, note}}; note says what to return:
"wrong_type" (a field of the wrong type), "missing" (a dict without a field), else the decision.
Environment: WFE_DSN, QUEUES, CONTRACTS, WFE_AMQP_URL.
"""
import dataclasses
import logging
import os
import sys
from typing import Optional

import wfe

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
env = os.environ.get
queues, contracts = env("QUEUES", "").split(","), env("CONTRACTS", "").split(",")
app = wfe.Worker(env("WFE_DSN", ""), amqp_url=env("WFE_AMQP_URL"))


@dataclasses.dataclass
class Order:
    amount: int
    account: str
    note: Optional[str] = None


@dataclasses.dataclass
class Review:
    spec: Order


@dataclasses.dataclass
class Decision:
    approved: bool
    limit: int


@app.handler(contracts[0], queue=queues[0], input=Review)
def review(task: wfe.Task) -> Decision:  # the return annotation is the result's type
    order = task.input.spec
    assert isinstance(task.input, Review) and isinstance(order, Order)
    if order.note == "wrong_type":
        return Decision(approved="yes", limit=1)  # type: ignore[arg-type]
    if order.note == "missing":
        return {"approved": True}  # type: ignore[return-value]
    return Decision(approved=order.amount < 100, limit=order.amount)


if len(contracts) > 1:
    import pydantic

    class POrder(pydantic.BaseModel):
        amount: int
        account: str
        note: Optional[str] = None

    class PReview(pydantic.BaseModel):
        spec: POrder

    class PDecision(pydantic.BaseModel):
        approved: bool
        limit: int

    @app.handler(contracts[1], queue=queues[1], input=PReview, output=PDecision)
    async def preview(task: wfe.Task) -> object:
        order = task.input.spec
        if order.note == "wrong_type":
            return {"approved": True, "limit": "lots"}
        if order.note == "missing":
            return {"approved": True}
        return PDecision(approved=order.amount < 100, limit=order.amount)

app.run()
