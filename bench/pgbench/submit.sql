-- Submit one run of a 12-stage workflow (one transaction).
SELECT run_id FROM wfe.submit('bench-submit', jsonb_build_object('x', :client_id::int));
