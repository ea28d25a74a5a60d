-- Runs that start themselves (docs/starting-runs.md): what `make demo`
-- sets up after the example workflows are active.  Run as an
-- administrator in the demo's database.

-- 1. A schedule: a payment-routing run every minute, for the default
--    tenant, as the role that creates it.  overlap 'skip': no new run
--    while the previous one is still running.
SELECT wfe.create_schedule('payments-sweep', 'payment-routing', '* * * * *',
                           '{"amount": 75, "account": "acc-sweep"}',
                           '{"time_zone": "Europe/Berlin", "overlap": "skip"}');

-- 2. A RabbitMQ ingress: the background worker consumes the queue
--    wfe.ingress.payments (bound to the exchange wfe.commands with routing
--    key submit.payments) and submits each run command as the role
--    payments_ingress -- which acts for the default tenant only and may
--    start payment-routing only.
CREATE ROLE payments_ingress IN ROLE wfe_submitter;
SELECT wfe.add_tenant_member('payments_ingress', 'default');
SELECT wfe.configure_ingress('payments', 'payments_ingress', '{"workflows": ["payment-routing"]}');
