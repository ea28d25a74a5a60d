--
-- wfe.redact_keys (operations.md "Redaction"): the one walk (wfe._redact)
-- on the shapes a document takes, and the setting's check.  The surfaces
-- it is applied to, as tenant logins, are test/tap/031_redaction_traces.pl.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS wfe;
RESET client_min_messages;
\set VERBOSITY default

-- nothing listed: the document as it is
SELECT wfe._redact('{"password": "p", "a": [{"password": 1}]}');

SET wfe.redact_keys = 'password, "api key", "a,b"';
SHOW wfe.redact_keys;
-- at any depth, whatever the value: scalar, object, array, null
SELECT wfe._redact('{"password": "p", "keep": 1, "in": {"password": {"deep": [1, 2]}, "n": null},
                     "list": [{"api key": ["x"]}, {"a,b": null}, 3, "password"], "password2": "kept"}');
-- a root array, a scalar, an empty object: nothing to redact but what is an object's key
SELECT wfe._redact('[{"password": 1}, "password"]'), wfe._redact('"password"'), wfe._redact('{}');
-- keys compare exactly: case, spaces and prefixes are other keys
SELECT wfe._redact('{"Password": 1, "password ": 2, "pass": 3, "api key": 4}');

-- what is not a list of keys is refused, and the setting stays
SET wfe.redact_keys = 'api key';
SET wfe.redact_keys = 'a,,b';
SET wfe.redact_keys = '""';
SHOW wfe.redact_keys;
RESET wfe.redact_keys;

-- the event log redacts as it is written (the trigger): the stored row
SET wfe.redact_keys = 'secret';
INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, detail)
VALUES (NULL, 'default', NULL, NULL, 'test.redaction', '{"secret": "s", "shown": "ok"}');
SELECT detail FROM wfe.events WHERE type = 'test.redaction';
DELETE FROM wfe.events WHERE type = 'test.redaction';
RESET wfe.redact_keys;
