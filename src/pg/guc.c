/*
 * guc.c — wfe's configuration parameters (all named wfe.*).
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "amqp/topology.h"
#include "bgw/bgw.h"
#include "wfe.h"
#include "core/jsonschema/jsonschema.h"

int			wfe_max_definition_bytes = 1024 * 1024;
int			wfe_max_stages = 500;
int			wfe_max_fanout = 64;
int			wfe_max_workflow_depth = 8;
int			wfe_max_map_items = 10000;
int			wfe_max_rate_keys = 10000;
int			wfe_max_expression_bytes = 4096;
bool		wfe_four_eyes = false;
bool		wfe_schema_format_assertion = false;
char	   *wfe_database = NULL;
int			wfe_poll_interval_ms = 1000;
int			wfe_retention_s = 7 * 24 * 3600;
int			wfe_bgw_batch = 100;
bool		wfe_notify = true;
char	   *wfe_amqp_uri = NULL;
char	   *wfe_amqp_password_file = NULL;
bool		wfe_publisher_enabled = true;
bool		wfe_consume_dlq = true;
int			wfe_publish_batch = 500;
int			wfe_confirm_window = 200;
int			wfe_broker_retry_ttl_ms = 5000;
int			wfe_broker_max_redeliveries = 5;
int			wfe_amqp_queue_type = WFE_QUEUE_CLASSIC;
int			wfe_track_threshold_bytes = 524288;
bool		wfe_publish_events = false;
int			wfe_max_payload_bytes = 64 * 1024 * 1024;
int			wfe_max_json_depth = WFE_JSON_DEPTH_CEILING;
int			wfe_max_name_bytes = 256;
int			wfe_callback_tolerance_s = 300;
int			wfe_max_schedule_catch_up = 100;
int			wfe_schema_step_budget = (int) WFE_SCHEMA_STEP_BUDGET;

/* wfe.amqp_queue_type's values, in topology.h's order. */
static const struct config_enum_entry queue_type_options[] = {
	{"classic", WFE_QUEUE_CLASSIC, false},
	{"quorum", WFE_QUEUE_QUORUM, false},
	{NULL, 0, false}
};

/* Define every wfe.* parameter, then reserve the prefix against typos. */
/* The core's validator reads the setting from its own variable. */
static void
assign_schema_format_assertion(bool newval, void *extra)
{
	wfe_jschema_set_format_assertion(newval);
}

/* The same for the validator's step budget. */
static void
assign_schema_step_budget(int newval, void *extra)
{
	wfe_jschema_set_step_budget(newval);
}

void
wfe_guc_init(void)
{
	DefineCustomIntVariable("wfe.max_definition_bytes",
							"Largest workflow definition source accepted, in bytes.",
							"Larger sources are refused with diagnostic yaml.too_large.",
							&wfe_max_definition_bytes,
							1024 * 1024, 1024, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_stages",
							"Most stages or tasks one definition may have.",
							"More are refused with diagnostic limits.stages.",
							&wfe_max_stages,
							500, 1, 10000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_fanout",
							"Most branches one fork may have.",
							"Wider forks are refused with diagnostic limits.fanout.",
							&wfe_max_fanout,
							64, 2, 1024,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_workflow_depth",
							"Deepest nesting of child runs (a submitted run's child is 1 deep).",
							"A workflow stage whose child would be deeper fails with limits.workflow_depth.",
							&wfe_max_workflow_depth,
							8, 1, 100,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_map_items",
							"Most elements one map stage may have.",
							"A literal items list longer is refused with diagnostic limits.map_items; "
							"items bound longer at run time fail the map with limits.map_items.",
							&wfe_max_map_items,
							10000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_rate_keys",
							"Most keyed token buckets one rate limit keeps per tenant.",
							"Further key values share the tenant's overflow bucket (operations.md \"Flow control\").",
							&wfe_max_rate_keys,
							10000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_expression_bytes",
							"Longest expression or interpolation accepted, in bytes.",
							"Longer ones are refused with diagnostic expr.too_large.",
							&wfe_max_expression_bytes,
							4096, 16, 65536,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.schema_format_assertion",
							 "Check JSON Schema \"format\" values (date-time, email, ipv4, ...) instead of ignoring them.",
							 "Off, the standard's default: format is an annotation.",
							 &wfe_schema_format_assertion,
							 false,
							 PGC_SUSET, 0,
							 NULL, assign_schema_format_assertion, NULL);
	DefineCustomIntVariable("wfe.schema_step_budget",
							"Most steps one JSON Schema validation may take.",
							"A step is a subschema applied to a value, a member or item visited, a value compared "
							"or 64 bytes read.  A validation needing more fails with SQLSTATE 54001.",
							&wfe_schema_step_budget,
							(int) WFE_SCHEMA_STEP_BUDGET, 1000, INT_MAX,
							PGC_SUSET, 0,
							NULL, assign_schema_step_budget, NULL);
	DefineCustomBoolVariable("wfe.four_eyes",
							 "Forbid approving or activating a definition version one created oneself.",
							 NULL,
							 &wfe_four_eyes,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	/*
	 * A PGC_POSTMASTER setting can only be defined while the postmaster
	 * loads preloaded libraries; without preload there is no worker to
	 * configure anyway.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("wfe.database",
								   "Database the wfe background worker serves.",
								   "Needs wfe in shared_preload_libraries; the worker waits until the extension exists there.",
								   &wfe_database,
								   "postgres",
								   PGC_POSTMASTER, 0,
								   NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.poll_interval_ms",
							"Longest the background worker sleeps without being woken.",
							"A safety net only: commits that add work wake the worker, and it sleeps until the earliest due timer.",
							&wfe_poll_interval_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.retention",
							"How long finished runs, their events and published outbox rows are kept.",
							NULL,
							&wfe_retention_s,
							7 * 24 * 3600, 60, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.worker_batch",
							"Most timers, deadlines or actions the background worker handles per transaction or round.",
							NULL,
							&wfe_bgw_batch,
							100, 1, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.notify",
							 "Send NOTIFY wfe_task_ready when tasks become claimable.",
							 "Poll workers LISTEN on it; turning it off leaves them to poll.",
							 &wfe_notify,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("wfe.amqp_uri",
							   "RabbitMQ the background worker publishes the outbox to (amqp://user:pass@host:port/vhost).",
							   "Empty: the publisher idles and rows stay in the outbox.  A changed URI reconnects at once.",
							   &wfe_amqp_uri,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("wfe.amqp_password_file",
							   "File whose first line is the RabbitMQ password (instead of one in wfe.amqp_uri).",
							   NULL,
							   &wfe_amqp_password_file,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.publisher_enabled",
							 "Publish the outbox from the background worker.",
							 "Off: external relays drain it with wfe.outbox_claim/wfe.outbox_ack.",
							 &wfe_publisher_enabled,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.consume_dlq",
							 "The publisher reads wfe.dlq back and fails each dead dispatch's attempt.",
							 "Off: the dead dispatches stay in wfe.dlq for another consumer.",
							 &wfe_consume_dlq,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.publish_batch",
							"Most outbox rows the publisher claims at once.",
							NULL,
							&wfe_publish_batch,
							500, 1, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.confirm_window",
							"Most published messages awaiting publisher confirms at once.",
							NULL,
							&wfe_confirm_window,
							200, 1, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.broker_retry_ttl_ms",
							"How long a rejected dispatch waits in its retry queue before it is delivered again.",
							"Applies to retry queues declared after the change; RabbitMQ cannot alter an existing queue's TTL.",
							&wfe_broker_retry_ttl_ms,
							5000, 1, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.broker_max_redeliveries",
							"Rejection cycles after which a consumer sends a dispatch to wfe.dlq.",
							"Consumers (wfe-worker) read it; x-death counts the cycles.",
							&wfe_broker_max_redeliveries,
							5, 0, 1000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("wfe.amqp_queue_type",
							 "The type of the RabbitMQ queues wfe declares: classic or quorum.",
							 "quorum: replicated across a RabbitMQ cluster, x-delivery-limit = wfe.broker_max_redeliveries, "
							 "at-least-once dead-lettering.  An existing queue keeps its type; see operations.md.",
							 &wfe_amqp_queue_type,
							 WFE_QUEUE_CLASSIC, queue_type_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.track_threshold_bytes",
							"Inputs larger than this go on the large track, by reference.",
							NULL,
							&wfe_track_threshold_bytes,
							524288, 1024, 1024 * 1024 * 1024,
							PGC_SUSET, 0,	/* unitless: SQL reads it as an integer */
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_payload_bytes",
							"Largest context, result, error or bound input accepted, in bytes.",
							"Larger ones are refused with SQLSTATE 54000 before anything is built from them.",
							&wfe_max_payload_bytes,
							64 * 1024 * 1024, 1024, 1024 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_json_depth",
							"Deepest nesting of JSON accepted (contexts, results, errors, options).",
							"Binding and contract validation work within this depth, so accepted data never fails there.",
							&wfe_max_json_depth,
							WFE_JSON_DEPTH_CEILING, 1, WFE_JSON_DEPTH_CEILING,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_name_bytes",
							"Longest name a caller chooses: stage, queue, worker id, idempotency key, option key, reason.",
							"Longer ones are refused with SQLSTATE 54000, so nobody writes megabytes into the logs.",
							&wfe_max_name_bytes,
							256, 64, 4096,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.callback_tolerance_s",
							"How far a signed callback's timestamp may be from now, in seconds.",
							"Older or newer ones answer expired; callback_ids are remembered this long.",
							&wfe_callback_tolerance_s,
							300, 1, 86400,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("wfe.publish_events",
							 "Also publish the event log's projection on the wfe.events exchange.",
							 NULL,
							 &wfe_publish_events,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("wfe.max_schedule_catch_up",
							"Most missed ticks a schedule with catch_up 'all' fires after downtime.",
							"The latest ones are fired; older ones are skipped (event schedule.skipped).",
							&wfe_max_schedule_catch_up,
							100, 1, 10000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	/*
	 * PGC_SUSET: redaction protects the secrets of everyone whose runs are
	 * logged, so only a superuser (postgresql.conf, ALTER SYSTEM, ALTER
	 * DATABASE or ALTER ROLE ... SET) may change it -- a submitter cannot
	 * turn it off for its own session, then read the detail it writes.
	 */
	DefineCustomStringVariable("wfe.redact_keys",
							   "JSON keys whose values telemetry shows as \"[redacted]\", at any depth.",
							   "Comma-separated; applies to event rows, the event projection, reports and spans, never to what workers receive.",
							   &wfe_redact_keys,
							   "",
							   PGC_SUSET, GUC_LIST_INPUT,
							   wfe_redact_keys_check, wfe_redact_keys_assign, NULL);
	MarkGUCPrefixReserved("wfe");
}
