-- One-row INSERT, one transaction: the machine's commit rate.
INSERT INTO bench_inserts (payload) VALUES ('{"n": 1}');
