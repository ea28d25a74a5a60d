--
-- Contracts: wfe.register_worker, wfe.register_action and the registry table.
-- Every refused call is followed by the SQLSTATE it raised.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Handlers used below.
CREATE FUNCTION public.contracts_echo(input jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE AS 'SELECT input';
CREATE FUNCTION public.contracts_int(input int) RETURNS int
    LANGUAGE sql IMMUTABLE AS 'SELECT input';
CREATE FUNCTION public.contracts_text(input jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE AS 'SELECT input::text';
CREATE FUNCTION public.contracts_two(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE AS 'SELECT a || b';
CREATE FUNCTION public.contracts_set(input jsonb) RETURNS SETOF jsonb
    LANGUAGE sql IMMUTABLE AS 'SELECT input';
CREATE PROCEDURE public.contracts_proc(input jsonb) LANGUAGE sql AS 'SELECT 1';

--
-- Registering both kinds
--
SELECT wfe.register_worker('contracts.render@1', 'contracts-rendering',
    '{"type":"object","required":["modelId"],"properties":{"modelId":{"type":"string"}}}',
    '{"type":"object","properties":{"url":{"type":"string"}}}');
-- defaults: no schemas
SELECT wfe.register_worker('contracts.plain@1', 'contracts');
-- named notation, as the docs show it
SELECT wfe.register_worker(ref => 'contracts.named@2', queue => 'contracts',
                           output_schema => '{"type":["object","null"]}');
-- an action dispatched to a queue
SELECT wfe.register_action('contracts.lookup@1', queue => 'contracts-actions',
    input_schema => '{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}}}');
-- an action run in the database
SELECT wfe.register_action('contracts.echo@1', handler => 'public.contracts_echo(jsonb)');
-- annotations are allowed anywhere in a schema
SELECT wfe.register_action('contracts.documented@1', queue => 'contracts',
    input_schema => '{"title":"In","description":"what goes in","type":"object","properties":{"n":{"type":"integer","description":"a count"}}}');
-- names may use digits, dots, dashes and underscores after the first letter
SELECT wfe.register_worker('a0._-z@123456789', 'a0._-z');

SELECT ref, kind, name, version, queue, handler, input_schema, output_schema,
       created_by = session_user AS by_session_user
  FROM wfe.contracts
 WHERE ref LIKE 'contracts.%' OR ref LIKE 'a0.%'
 ORDER BY ref;

-- The compiler sees the registry in its own format.
SELECT c
  FROM jsonb_array_elements(wfe._contracts_json()) AS c
 WHERE c ->> 'ref' IN ('contracts.echo@1', 'contracts.render@1')
 ORDER BY c ->> 'ref';

--
-- Re-registering: identical content is a no-op, different content an error
--
SELECT wfe.register_worker('contracts.render@1', 'contracts-rendering',
    '{"properties":{"modelId":{"type":"string"}},"required":["modelId"],"type":"object"}',
    '{"properties":{"url":{"type":"string"}},"type":"object"}');
SELECT wfe.register_action('contracts.echo@1', 'public.contracts_echo(jsonb)');
-- NULL schemas mean "no constraint", the same as the default {}
SELECT wfe.register_worker('contracts.plain@1', 'contracts', NULL, NULL);
SELECT count(*) FROM wfe.contracts WHERE ref LIKE 'contracts.%';

SELECT wfe.register_worker('contracts.render@1', 'contracts-rendering');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.plain@1', 'other-queue');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.plain@1', queue => 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.echo@1', queue => 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.named@2', 'contracts', output_schema => '{"type":"object"}');
\echo :LAST_ERROR_SQLSTATE
-- nothing changed
SELECT ref, kind, queue, handler, output_schema
  FROM wfe.contracts WHERE ref IN ('contracts.render@1', 'contracts.plain@1', 'contracts.echo@1', 'contracts.named@2')
 ORDER BY ref;

--
-- Malformed references
--
SELECT wfe.register_worker('Contracts.upper@1', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.noversion', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.zero@0', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.leading@01', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.semver@1.2', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('1contracts@1', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts two@1', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.at@1@2', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.big@2147483648', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.big@2147483647', 'contracts');
SELECT wfe.register_worker(NULL, 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action(NULL, queue => 'contracts');
\echo :LAST_ERROR_SQLSTATE

--
-- Queues
--
SELECT wfe.register_worker('contracts.noqueue@1', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.badqueue@1', 'Rendering');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.badqueue@1', 'render queue');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.badqueue@1', '');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.badqueue@1', repeat('q', 64));
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.longqueue@1', repeat('q', 63));
SELECT wfe.register_action('contracts.badqueue@1', queue => '-actions');
\echo :LAST_ERROR_SQLSTATE

--
-- An action has exactly one of handler and queue
--
SELECT wfe.register_action('contracts.neither@1');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.both@1', 'public.contracts_echo(jsonb)', 'contracts');
\echo :LAST_ERROR_SQLSTATE

--
-- Handlers must be functions (input jsonb) RETURNS jsonb
--
SELECT wfe.register_action('contracts.missing@1', 'public.contracts_nothing(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.int@1', 'public.contracts_int(int)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.text@1', 'public.contracts_text(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.two@1', 'public.contracts_two(jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.set@1', 'public.contracts_set(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.proc@1', 'public.contracts_proc(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.agg@1', 'pg_catalog.jsonb_agg(anyelement)');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.dangling@1', 4294967295::oid::regprocedure);
\echo :LAST_ERROR_SQLSTATE

--
-- Schemas: JSON Schema draft 2020-12 (draft-07 by "$schema"), compiled at
-- registration by the one validator; refusals name the JSON pointer
--
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '[]');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{}', '"object"');
\echo :LAST_ERROR_SQLSTATE
-- a misspelt keyword must not silently check nothing
SELECT wfe.register_worker('contracts.schema@1', 'contracts',
    '{"type":"object","properties":{"a/b~c":{"type":"array","items":{"type":"object","properties":{"x":{"minimun":0}}}}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{}', '{"$ref":"#/definitions/x"}');
\echo :LAST_ERROR_SQLSTATE
-- remote references are refused with the pointer that holds them
SELECT wfe.register_worker('contracts.schema@1', 'contracts',
    '{"properties":{"addr":{"$ref":"https://example.com/address.json"}}}');
\echo :LAST_ERROR_SQLSTATE
-- patterns run in linear time: backreferences and lookaround are refused
SELECT wfe.register_worker('contracts.schema@1', 'contracts',
    '{"properties":{"id":{"type":"string","pattern":"^(a+)\\1$"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"patternProperties":{"^(?!x-)":{}}}');
\echo :LAST_ERROR_SQLSTATE
-- dialects other than 2020-12 and draft-07 are refused
SELECT wfe.register_worker('contracts.schema@1', 'contracts',
    '{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"type":"strng"}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"type":["string","string"]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"type":[]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"type":1}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"properties":["a"]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"properties":{"a":1}}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"required":"a"}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"required":["a",1]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"required":["a","a"]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"items":[{"type":"string"}]}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"maxLength":-1}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"multipleOf":0}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"enum":"a"}');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_worker('contracts.schema@1', 'contracts', '{"description":{"text":"no"}}');
\echo :LAST_ERROR_SQLSTATE
-- none of the refused registrations left a row
SELECT count(*) FROM wfe.contracts
 WHERE ref ~ '^contracts\.(schema|neither|both|missing|int|text|two|set|proc|agg|dangling|badqueue|noqueue|zero|leading|semver)@';

-- what 0.1.0 refused registers now: the keywords of the standard, $ref into
-- $defs, boolean schemas, a draft-07 schema, a pattern
SELECT wfe.register_worker('contracts.rich@1', 'contracts',
    '{"type":"object","additionalProperties":false,"required":["modelId"],
      "properties":{"modelId":{"type":"string","pattern":"^m-[0-9]+$","maxLength":40},
                    "size":{"$ref":"#/$defs/size"},"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true},
                    "extra":true},
      "$defs":{"size":{"type":"integer","minimum":1,"maximum":100}}}',
    '{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
      "properties":{"n":{"type":"integer","multipleOf":2}},"dependencies":{"n":["m"]}}');
SELECT wfe._validate(input_schema, '{"modelId":"m-1","size":100,"tags":["a"]}') AS valid,
       wfe._validate(input_schema, '{"modelId":"m-1","size":101}') AS too_big,
       wfe._validate(input_schema, '{"modelId":"x-1"}') AS bad_pattern,
       wfe._validate(input_schema, '{"modelId":"m-1","other":1}') AS not_allowed
  FROM wfe.contracts WHERE ref = 'contracts.rich@1';
SELECT wfe._validate(output_schema, '{"n":4,"m":0}') AS valid,
       wfe._validate(output_schema, '{"n":3,"m":0}') AS odd,
       wfe._validate(output_schema, '{"n":4}') AS dependency
  FROM wfe.contracts WHERE ref = 'contracts.rich@1';

-- boolean schemas at the top (true: anything, false: nothing), and an
-- empty enum, which nothing satisfies
SELECT wfe.register_worker('contracts.boolean@1', 'contracts', 'true', 'false');
SELECT wfe.register_worker('contracts.boolean@1', 'contracts', 'true', 'false');
SELECT wfe.register_worker('contracts.never@1', 'contracts', '{"properties":{"mode":{"enum":[]}}}');
SELECT ref, input_schema, output_schema FROM wfe.contracts
 WHERE ref IN ('contracts.boolean@1', 'contracts.never@1') ORDER BY ref;
SELECT wfe._validate(input_schema, '{"any":[1]}') AS anything,
       wfe._validate(output_schema, '{}') AS nothing,
       wfe._validate(output_schema, 'null') AS not_even_null
  FROM wfe.contracts WHERE ref = 'contracts.boolean@1';
SELECT wfe._validate(input_schema, '{}') AS absent,
       wfe._validate(input_schema, '{"mode":"x"}') AS present
  FROM wfe.contracts WHERE ref = 'contracts.never@1';
-- the table still refuses what is no schema at all
\set VERBOSITY terse
INSERT INTO wfe.contracts (ref, kind, name, version, queue, input_schema)
VALUES ('contracts.raw@1', 'worker', 'contracts.raw', 1, 'contracts', '[]');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO wfe.contracts (ref, kind, name, version, queue, output_schema)
VALUES ('contracts.raw@1', 'worker', 'contracts.raw', 1, 'contracts', '"true"');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default

--
-- Registered contracts are immutable, whoever asks
--
UPDATE wfe.contracts SET queue = 'elsewhere' WHERE ref = 'contracts.plain@1';
\echo :LAST_ERROR_SQLSTATE
UPDATE wfe.contracts SET queue = 'elsewhere' WHERE false;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM wfe.contracts WHERE ref = 'contracts.plain@1';
\echo :LAST_ERROR_SQLSTATE
TRUNCATE wfe.contracts;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO wfe.contracts (ref, kind, name, version, queue)
VALUES ('contracts.plain@1', 'worker', 'contracts.plain', 1, 'x')
    ON CONFLICT (ref) DO UPDATE SET queue = excluded.queue;
\echo :LAST_ERROR_SQLSTATE
SELECT ref, queue FROM wfe.contracts WHERE ref = 'contracts.plain@1';

--
-- Privileges: only wfe_admin registers contracts
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_wfe_contracts_admin;
DROP ROLE IF EXISTS regress_wfe_contracts_reader;
DROP ROLE IF EXISTS regress_wfe_contracts_nobody;
RESET client_min_messages;
CREATE ROLE regress_wfe_contracts_admin IN ROLE wfe_admin;
CREATE ROLE regress_wfe_contracts_reader IN ROLE wfe_reader;
CREATE ROLE regress_wfe_contracts_nobody;
-- a role outside the wfe roles does not even see the schema
SET SESSION AUTHORIZATION regress_wfe_contracts_nobody;
SELECT wfe.register_worker('contracts.denied@1', 'contracts');
\echo :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
-- another wfe role may read the registry but not register
SET SESSION AUTHORIZATION regress_wfe_contracts_reader;
SELECT ref, kind, queue FROM wfe.contracts WHERE ref = 'contracts.plain@1';
SELECT wfe.register_worker('contracts.denied@1', 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe.register_action('contracts.denied@1', queue => 'contracts');
\echo :LAST_ERROR_SQLSTATE
SELECT wfe._register_contract('contracts.denied@1', 'worker', 'contracts', NULL, '{}', '{}');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO wfe.contracts (ref, kind, name, version, queue)
VALUES ('contracts.denied@1', 'worker', 'contracts.denied', 1, 'contracts');
\echo :LAST_ERROR_SQLSTATE
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_wfe_contracts_admin;
SELECT wfe.register_worker('contracts.by-admin@1', 'contracts');
SELECT wfe.register_action('contracts.private@1', 'public.contracts_echo(jsonb)');
RESET SESSION AUTHORIZATION;
-- a handler the registering role may not execute is refused
REVOKE EXECUTE ON FUNCTION public.contracts_echo(jsonb) FROM PUBLIC;
SET SESSION AUTHORIZATION regress_wfe_contracts_admin;
SELECT wfe.register_action('contracts.private@2', 'public.contracts_echo(jsonb)');
\echo :LAST_ERROR_SQLSTATE
-- created_by is the registering session's role
SELECT ref, created_by FROM wfe.contracts
 WHERE ref IN ('contracts.by-admin@1', 'contracts.private@1', 'contracts.private@2', 'contracts.denied@1')
 ORDER BY ref;
RESET SESSION AUTHORIZATION;
DROP ROLE regress_wfe_contracts_admin;
DROP ROLE regress_wfe_contracts_reader;
DROP ROLE regress_wfe_contracts_nobody;
