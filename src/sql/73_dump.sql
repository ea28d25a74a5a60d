-- pg_dump: the runtime's tables hold users' data (runs and their history,
-- the outbox, payloads) and configuration (queues), so a dump of the
-- database includes their rows, like the registry's and the definitions'.
SELECT pg_catalog.pg_extension_config_dump('wfe.queues', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.queue_grants', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.tenant_members', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.runs', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.run_stages', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.outputs', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.events', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.events_default', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.timers', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.payloads', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.runs_run_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.events_event_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.outbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.timers_timer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.dead_letters_dead_letter_id_seq', '');
