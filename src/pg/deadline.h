/*
 * deadline.h — the execution deadline of a running attempt, written once
 * for the statements that start one (a claim, an accept) and renew it (a
 * heartbeat).  SQL text over a wfe.run_stages row aliased st.
 */
#ifndef WFE_DEADLINE_H
#define WFE_DEADLINE_H

/*
 * The window an attempt is granted from now: the claim's lease (SQL
 * expression `lease`, NULL for none) or else the stage's execution deadline,
 * cut short by its heartbeat window when it has one.  A lease longer than
 * the execution deadline is cut to it: no lease outlives the stage's
 * execution deadline (least() skips the NULLs).  A start sets deadline_at =
 * now() + this; a heartbeat renews it, never past the execution deadline
 * (WFE_SQL_EXEC_END) and never earlier than it was.
 */
#define WFE_SQL_WINDOW(lease) \
	"make_interval(secs => least(" lease ", st.exec_ms," \
	" coalesce(st.heartbeat_ms, 2147483647)) / 1000.0)"

/* When the execution deadline of the running attempt ends. */
#define WFE_SQL_EXEC_END "st.started_at + make_interval(secs => st.exec_ms / 1000.0)"

#endif							/* WFE_DEADLINE_H */
