--
-- Run-time helpers: wfe._validate (JSON-Schema subset), wfe._bind_input
-- (${...} binding) and wfe._eval_decision (decision branches).
-- Every refused call is followed by the SQLSTATE it raised.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- The evaluation root the binding and decision examples run over.
\set root '{"context": {"modelId": "m-1", "count": 3, "ratio": 0.25, "flag": true, "nothing": null, "obj": {"a": 1}, "list": [1, "x"], "amount": 15000, "zero": 0}, "stages": {"cache-lookup": {"result": {"hit": true, "uri": "s3://m"}}}, "outputs": {"restore_session": {"user_session": "abc"}}, "run": {"id": 42, "tenant": "acme", "workflow": "model-ingest", "version": "2.3.0"}}'

--
-- Declarations: pure, parallel safe, internal (no EXECUTE for PUBLIC)
--
SELECT p.proname, p.provolatile, p.proisstrict, p.proparallel,
       pg_get_function_arguments(p.oid) AS arguments,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented,
       EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
                WHERE a.grantee = 0) AS public_execute
  FROM pg_proc AS p
 WHERE p.pronamespace = 'wfe'::regnamespace
   AND p.proname IN ('_validate', '_bind_input', '_eval_decision')
 ORDER BY p.proname;

--
-- wfe._validate: NULL when valid, else the first violation with its path
--
SELECT t AS type, v AS value, wfe._validate(jsonb_build_object('type', t), v::jsonb) AS violation
  FROM (VALUES ('object', '{}'), ('object', '[]'),
               ('array', '[1]'), ('array', '"a"'),
               ('string', '"s"'), ('string', '1'),
               ('number', '1.5'), ('number', '2'), ('number', 'true'),
               ('integer', '2'), ('integer', '2.0'), ('integer', '2.5'),
               ('boolean', 'false'), ('boolean', 'null'),
               ('null', 'null'), ('null', '0')) AS c(t, v);
SELECT wfe._validate('{"type": ["string", "null"]}', 'null') AS nullable_null,
       wfe._validate('{"type": ["string", "null"]}', '7') AS nullable_int;

\set model_schema '{"type": "object", "title": "render input", "required": ["modelId"], "properties": {"modelId": {"type": "string", "description": "the model"}, "opts": {"type": "object", "required": ["mode"], "properties": {"mode": {"enum": ["fast", "safe"]}}}, "tags": {"type": "array", "items": {"type": "string"}}, "cache-key": {"type": "integer"}}}'
SELECT v AS value, wfe._validate(:'model_schema', v::jsonb) AS violation
  FROM (VALUES ('{"modelId": "m", "opts": {"mode": "safe"}, "tags": ["a"], "extra": 1}'),
               ('{"modelId": 7}'),
               ('{"other": 1}'),
               ('{"modelId": "m", "opts": {}}'),
               ('{"modelId": "m", "opts": {"mode": "slow"}}'),
               ('{"modelId": "m", "tags": ["a", 2]}'),
               ('{"modelId": "m", "cache-key": "k"}'),
               ('"not an object"')) AS c(v);
-- enum compares deeply; 1.0 equals 1
SELECT v AS value,
       wfe._validate('{"enum": [1, "one", null, {"a": [1, {"b": true}]}]}', v::jsonb) AS violation
  FROM (VALUES ('1.0'), ('"one"'), ('null'), ('{"a": [1, {"b": true}]}'),
               ('{"a": [1, {"b": false}]}'), ('"two"')) AS c(v);
-- format is an annotation unless wfe.schema_format_assertion is on
SELECT wfe._validate('{"format": "email"}', '"not an email"') AS annotation;
SET wfe.schema_format_assertion = on;
SELECT wfe._validate('{"format": "email"}', '"not an email"') AS asserted,
       wfe._validate('{"format": "email"}', '"ann@example.org"') AS valid,
       wfe._validate('{"properties": {"at": {"format": "date-time"}}}', '{"at": "2026-02-30T10:00:00Z"}') AS bad_date;
RESET wfe.schema_format_assertion;
SELECT wfe._validate('{"format": "email"}', '"not an email"') AS annotation_again;
-- schemas wfe cannot use are refused, not used
SELECT wfe._validate('{"type": "text"}', '1');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._validate('{"properties": {"a": 1}}', '{"a": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._validate('[]', '1');
\echo :LAST_ERROR_SQLSTATE
-- STRICT
SELECT wfe._validate(NULL, '1') IS NULL AS null_in_null_out;

--
-- Bounded work (docs/dsl.md "Bounds"): uniqueItems sorts, a step budget
-- bounds the rest (54001), and a cancel stops a validation
--
-- 40,000 items: pairwise that was 800 million comparisons, each paid from
-- the step budget; sorted it is about 850,000 steps (a key per item, then
-- n log n), well inside a budget of 2 million.  A budget, not a timeout: a
-- loaded machine takes longer but not more steps, and a pairwise scan
-- still fails here (54001)
SET wfe.schema_step_budget = 2000000;
SELECT wfe._validate('{"uniqueItems": true}',
                     (SELECT jsonb_agg(jsonb_build_object('id', i, 'tag', 't')) FROM generate_series(1, 40000) AS i)) AS distinct_40k;
SELECT wfe._validate('{"uniqueItems": true}',
                     (SELECT jsonb_agg(jsonb_build_object('id', i, 'tag', 't')) || '[{"tag": "t", "id": 39999.0}]'
                        FROM generate_series(1, 40000) AS i)) AS one_repeated;
RESET wfe.schema_step_budget;
-- equal by value: 1 and 1.0, the same members in another order
SELECT wfe._validate('{"uniqueItems": true}', '[1, 2, 1.0]') AS numbers,
       wfe._validate('{"uniqueItems": true}', '[{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}]') AS objects,
       wfe._validate('{"uniqueItems": true}', '[{"a": 1}, {"a": "1"}, [1], "1"]') AS distinct_values;
-- 28 levels of anyOf over two $refs to the next level, ending in a type
-- the value fails: 2^28 evaluations from 2 KB of schema
SELECT jsonb_build_object(
         '$defs', jsonb_object_agg('d' || i,
                    CASE WHEN i < 28
                         THEN jsonb_build_object('anyOf', jsonb_build_array(
                                jsonb_build_object('$ref', '#/$defs/d' || (i + 1)),
                                jsonb_build_object('$ref', '#/$defs/d' || (i + 1))))
                         ELSE '{"type": "string"}' END),
         '$ref', '#/$defs/d0') AS bomb
  FROM generate_series(0, 28) AS i \gset
SELECT length(:'bomb') < 2100 AS about_2kb;
SELECT wfe._validate(:'bomb', '1');
\echo :LAST_ERROR_SQLSTATE
-- a value the first branch of every level accepts is cheap: valid
SELECT wfe._validate(:'bomb', '"s"') AS first_branches;
-- the budget is at least 1000 steps
SET wfe.schema_step_budget = 999;
\echo :LAST_ERROR_SQLSTATE
-- with a budget of minutes, statement_timeout stops it
SET wfe.schema_step_budget = 2000000000;
SET statement_timeout = '1s';
SELECT wfe._validate(:'bomb', '1');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
RESET wfe.schema_step_budget;

--
-- wfe._bind_input: typed whole values, text interpolation, failures
--
SELECT wfe._bind_input(
    '{"modelId": "${context.modelId}", "count": "${context.count}", "ratio": "${payload.ratio}",
      "flag": "${context.flag}", "obj": "${context.obj}", "list": "${context.list}",
      "hit": "${stages[\"cache-lookup\"].result.hit}", "run": "${run.id}"}', :'root');
SELECT wfe._bind_input(
    '{"url": "${stages[\"cache-lookup\"].result.uri}/${context.modelId}?n=${context.count}&r=${context.ratio}&f=${context.flag}",
      "tenant": "tenant ${run.tenant}", "literal": "$${context.modelId} costs $5",
      "session": "${outputs.restore_session.user_session}"}', :'root');
-- nested templates; literals and keys are kept as they are
SELECT wfe._bind_input(
    '{"a": {"b": ["${context.count}", {"c": "id-${context.modelId}"}, 7, null, true]},
      "${context.modelId}": "key"}', :'root');
-- binding.missing, binding.null, binding.type: answers, not errors
SELECT t AS template, wfe._bind_input(t::jsonb, :'root') AS answer
  FROM (VALUES ('{"modelId": "${context.nope}"}'),
               ('{"modelId": "${context.nothing}"}'),
               ('{"u": "x/${context.nope}"}'),
               ('{"u": "x/${context.nothing}"}'),
               ('{"u": "x/${context.obj}"}'),
               ('{"u": "x/${context.list}"}'),
               ('{"a": {"b": [1, {"c": "${stages.other.result.x}"}]}}'),
               ('{"my key": "${context.list[5]}"}')) AS c(t);
-- against the contract's input schema
SELECT wfe._bind_input('{"modelId": "${context.modelId}"}', :'root', :'model_schema') AS conforming,
       wfe._bind_input('{"modelId": "${context.count}"}', :'root', :'model_schema') AS wrong_type,
       wfe._bind_input('{"tags": "${context.list}"}', :'root', :'model_schema') AS missing_required;
SELECT wfe._bind_input('{"modelId": "${context.nope}"}', :'root', :'model_schema')
       AS binding_before_schema;
SELECT wfe._bind_input(template => '{"x": 1}', root => '{}', input_schema => NULL) AS no_schema;
-- bad arguments raise
SELECT wfe._bind_input('{"x": 1}', :'root', '{"type": "text"}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._bind_input(NULL, :'root');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._bind_input('{"x": 1}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._bind_input('["${context.count}"]', :'root');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._bind_input('{"x": 1}', '[]');
\echo :LAST_ERROR_SQLSTATE

--
-- wfe._eval_decision: the seed expressions verbatim, and evaluation errors
--
-- (in \set, \\ stands for one backslash)
\set seed000 '[{"when": "stages[\\"cache-lookup\\"].result.hit == true", "next": "publish"}, {"when": "true", "next": "convert"}]'
\echo :seed000
\set seed004 '[{"when": "has(payload.amount) && payload.amount > 10000", "next": "review"}, {"when": "true", "next": "auto"}]'
SELECT wfe._eval_decision(:'seed000', :'root') AS hit,
       wfe._eval_decision(:'seed000', '{"stages": {"cache-lookup": {"result": {"hit": false}}}}') AS miss;
SELECT r AS root, wfe._eval_decision(:'seed004', r::jsonb) AS decision
  FROM (VALUES ('{"context": {"amount": 15000}}'),
               ('{"context": {"amount": 10000}}'),
               ('{"context": {}}')) AS c(r);
-- expr.eval: division by zero, a missing field without has(), a type
-- mismatch, a non-boolean result; each names its branch
SELECT w AS "when", wfe._eval_decision(
           jsonb_build_array(jsonb_build_object('when', 'false', 'next', 'a'),
                             jsonb_build_object('when', w, 'next', 'b'),
                             jsonb_build_object('when', 'true', 'next', 'c')),
           :'root') AS decision
  FROM (VALUES ('context.amount / context.zero > 1'),
               ('payload.missing > 1'),
               ('has(payload.missing) && payload.missing > 1'),
               ('context.modelId > 1'),
               ('context.amount'),
               ('size(context.list) == 2')) AS c(w);
-- CEL in the server (docs/dsl.md "Expressions"): literals, macros,
-- functions, timestamps, matches(), and && / || absorbing an error that the
-- other side decides; the last three are evaluation errors
SELECT w AS "when", wfe._eval_decision(
           jsonb_build_array(jsonb_build_object('when', w, 'next', 'yes'),
                             jsonb_build_object('when', 'true', 'next', 'no')),
           '{"context": {"country": "DE", "email": "ann@example.com",
             "items": [{"qty": 1, "price": 9.5}, {"qty": 3, "price": 2.0}],
             "at": "2024-02-29T12:30:00Z", "amount": 7}}') AS decision
  FROM (VALUES ('payload.country in ["DE", "FR"]'),
               ('payload.items.exists(i, i.qty > 2 && i.price < 5.0)'),
               ('payload.items.map(i, i.qty).filter(q, q > 1) == [3]'),
               ('payload.email.matches(r"^[a-z]+@example\.com$")'),
               ('timestamp(payload.at).getDayOfWeek() == 4'),
               ('timestamp(payload.at) + duration("12h") > timestamp("2024-03-01T00:00:00Z")'),
               ('(2/0 > 3 ? false : true) || true'),
               ('payload.missing > 1 || payload.amount == 7'),
               ('1.0 / 0.0 > 1e308 && false < true && 1 == 1u && 2 < 2.5'),
               ('payload.amount * 1.5 > 10'),
               ('payload.amount > 9223372036854775807 - 1 + 1 + payload.amount'),
               ('payload.items.all(i, i.qty / (i.qty - 1) > 0)')) AS c(w);
SELECT wfe._eval_decision('[{"when": "false", "next": "a"}]', '{}') AS no_branch_true;
-- malformed branches raise
SELECT wfe._eval_decision('[{"when": "true"}]', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._eval_decision('{"when": "true", "next": "a"}', '{}');
\echo :LAST_ERROR_SQLSTATE

--
-- Repeated calls: successes and failures alike (memory is released per call)
--
SELECT count(*) FILTER (WHERE (wfe._bind_input('{"u": "x${context.count}", "o": "${context.obj}"}', :'root') ->> 'ok')::boolean) AS bound,
       count(*) FILTER (WHERE wfe._bind_input('{"u": "${context.nope}"}', :'root') ->> 'code' = 'binding.missing') AS missing,
       count(*) FILTER (WHERE wfe._eval_decision(:'seed004', :'root') ->> 'next' = 'review') AS decided,
       count(*) FILTER (WHERE wfe._validate(:'model_schema', '{"modelId": 1}') IS NOT NULL) AS violations
  FROM generate_series(1, 2000);

--
-- What names a message (src/pg/message.c over src/amqp/topology.c): the id
-- is md5(run:stage:attempt:fence:kind) as a uuid, as 0.1.0 and 0.2.0 wrote
-- it in SQL (a message republished across an upgrade keeps its id); the
-- exchange and routing key of each kind; an unknown kind or track is 22023.
--
SELECT wfe._message_id(42, 'charge', 3, 7, 'dispatch') = md5('42:charge:3:7:dispatch')::uuid AS same_id,
       wfe._message_id(42, 'charge', 3, 7, 'cancel') = md5('42:charge:3:7:cancel')::uuid AS same_cancel_id,
       wfe._message_id(42, NULL, 3, 7, 'dispatch') IS NULL AS null_in_null_out;
SELECT wfe._exchange('dispatch') AS dispatch, wfe._exchange('cancel') AS cancel, wfe._exchange('event') AS event;
SELECT wfe._routing_key('dispatch', 'pay.ments', 'small') AS small, wfe._routing_key('dispatch', 'pay.ments', 'large') AS large,
       wfe._routing_key('cancel', 'pay.ments') AS cancel, wfe._routing_key('cancel', NULL) IS NULL AS no_queue;
SELECT wfe._exchange('gossip');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._routing_key('dispatch', 'payments', 'medium');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._routing_key('event', 'payments');
\echo :LAST_ERROR_SQLSTATE
