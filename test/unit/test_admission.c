/*
 * test_admission.c — unit tests of the task limits' decisions
 * (src/core/flow/admission.c): the lock-order rule, the sides of a
 * release, and which held tasks a release dispatches.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/flow/admission.h"

#include "tap.h"

int
main(void)
{
	/* the lock order: tenants by name, then queues by name */
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "b", NULL, NULL) == WFE_LOCK_WAIT, "a first tenant: wait");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "c", "b", NULL) == WFE_LOCK_WAIT, "a later tenant: wait");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "a", "b", NULL) == WFE_LOCK_TRY, "an earlier tenant: only try");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "b", "b", NULL) == WFE_LOCK_TRY, "the same tenant: only try (granted again)");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "z", NULL, "q") == WFE_LOCK_TRY, "any tenant after a queue: only try");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "z", "b", "q") == WFE_LOCK_TRY, "a later tenant after a queue: only try");
	ok(wfe_admission_lock_mode(WFE_LIMIT_QUEUE, "q", "z", NULL) == WFE_LOCK_WAIT, "a queue after tenants: wait");
	ok(wfe_admission_lock_mode(WFE_LIMIT_QUEUE, "r", NULL, "q") == WFE_LOCK_WAIT, "a later queue: wait");
	ok(wfe_admission_lock_mode(WFE_LIMIT_QUEUE, "p", NULL, "q") == WFE_LOCK_TRY, "an earlier queue: only try");
	ok(wfe_admission_lock_mode(WFE_LIMIT_QUEUE, "q", NULL, "q") == WFE_LOCK_TRY, "the same queue: only try");
	/* C collation: bytes, so "B" < "a" and "a" < "ab" */
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "a", "B", NULL) == WFE_LOCK_WAIT, "byte order: \"a\" after \"B\"");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "ab", "a", NULL) == WFE_LOCK_WAIT, "a longer name after its prefix");
	ok(wfe_admission_lock_mode(WFE_LIMIT_TENANT, "\xc3\xa9", "z", NULL) == WFE_LOCK_WAIT, "UTF-8 after ASCII");

	/* no circle: any sequence of waits a transaction makes is increasing in (kind, name) */
	{
		const char *names[] = {"a", "b", "c"};
		int			bad = 0;

		for (int seq = 0; seq < 6 * 6 * 6 * 6; seq++)
		{
			const char *ht = NULL,
					   *hq = NULL;
			int			last_rank = -1,
						s = seq;

			for (int step = 0; step < 4; step++, s /= 6)
			{
				wfe_limit_kind kind = (s % 6) < 3 ? WFE_LIMIT_TENANT : WFE_LIMIT_QUEUE;
				int			i = (s % 6) % 3;
				int			rank = (kind == WFE_LIMIT_QUEUE ? 3 : 0) + i;

				if (wfe_admission_lock_mode(kind, names[i], ht, hq) != WFE_LOCK_WAIT)
					continue;
				if (rank <= last_rank)
					bad++;
				last_rank = rank;
				if (kind == WFE_LIMIT_TENANT)
					ht = names[i];
				else
					hq = names[i];
			}
		}
		ok(bad == 0, "every wait is past all the waits before it (%d out of order)", bad);
	}

	/* the sides of a release */
	ok(wfe_release_tenant_side(false, false, true, false, 0), "an unlimited tenant's limit lifted: its held tasks may go");
	ok(!wfe_release_tenant_side(false, true, true, false, 0), "a task of an unlimited tenant ended: not the tenant's side");
	ok(!wfe_release_tenant_side(false, false, false, false, 0), "no tenant: not the tenant's side");
	ok(!wfe_release_tenant_side(true, false, true, false, 5), "a limited tenant whose lock was busy: not its side");
	ok(wfe_release_tenant_side(true, false, true, true, 0), "a limit changed (raised, lowered): its side");
	ok(wfe_release_tenant_side(true, true, true, true, 1), "an end that left one slot: it was at its limit");
	ok(!wfe_release_tenant_side(true, true, true, true, 2), "an end that left two slots: nothing of it was held");
	ok(!wfe_release_tenant_side(true, true, true, true, 0), "an end that left none (limit lowered): nothing fits");
	ok(wfe_release_queue_side(true, true, true, true), "a bounded queue, locked: its side");
	ok(!wfe_release_queue_side(true, true, true, false), "a bounded queue, lock busy: not its side");
	ok(wfe_release_queue_side(false, true, false, false), "a queue's limit lifted: everything held in it may go");
	ok(!wfe_release_queue_side(false, true, true, false), "a task of an unbounded queue ended: not the queue's side");
	ok(!wfe_release_queue_side(false, false, false, false), "a paused or poll queue: not the queue's side");

	/* which held tasks go: queue q (room 0) bounded, tenants t1 (room 1), t2 (room 0, lock missed) */
	{
		wfe_release_scope sc = {true, 0, false, -1};
		int			room[3] = {2, 1, 0};
		int			qslot[5] = {0, 0, 0, 0, 0};
		int			tslot[5] = {1, 2, 1, -1, -1};
		bool		go[5];
		int			n = wfe_release_pick(&sc, 5, qslot, tslot, room, go);

		ok(n == 2, "two go, the queue's room (got %d)", n);
		ok(go[0], "t1's first takes t1's one slot");
		ok(!go[1], "t2's stays held: its lock was not taken");
		ok(!go[2], "t1's second stays held: t1 is full");
		ok(go[3], "an unlimited tenant's takes the queue's last slot");
		ok(!go[4], "the queue is full: the rest stay held");
		ok(room[0] == 0 && room[1] == 0, "the rooms are consumed");
		ok(wfe_release_exhausted(&sc, room), "and the release is exhausted");
	}
	/* a tenant side over two queues: one limited (room 1), one not */
	{
		wfe_release_scope sc = {false, -1, true, 1};
		int			room[2] = {1, 3};
		int			qslot[4] = {0, -1, 0, -1};
		int			tslot[4] = {1, 1, 1, 1};
		bool		go[4];
		int			n = wfe_release_pick(&sc, 4, qslot, tslot, room, go);

		ok(n == 3 && go[0] && go[1] && !go[2] && go[3], "the limited queue's second stays held, the others go");
		ok(room[1] == 0, "the tenant's three slots are taken");
	}
	/* a lifted limit: no bound on either side, everything goes */
	{
		wfe_release_scope sc = {true, -1, false, -1};
		int			room[1] = {0};
		int			qslot[3] = {-1, -1, -1};
		int			tslot[3] = {-1, -1, -1};
		bool		go[3];

		ok(wfe_release_pick(&sc, 3, qslot, tslot, room, go) == 3, "a lifted queue limit releases every held task");
		ok(!wfe_release_exhausted(&sc, room), "and is never exhausted");
	}
	/* the invariant: never more go than any room */
	{
		int			bad = 0;

		for (int seed = 1; seed <= 500; seed++)
		{
			int			room[4],
						before[4],
						took[4] = {0, 0, 0, 0};
			int			qslot[20],
						tslot[20];
			bool		go[20];
			wfe_release_scope sc = {true, 0, seed % 2 == 0, 2};
			unsigned	r = (unsigned) seed * 2654435761u;

			for (int j = 0; j < 4; j++)
			{
				r = r * 1103515245u + 12345u;
				before[j] = room[j] = (int) (r >> 16) % 4;
			}
			for (int k = 0; k < 20; k++)
			{
				r = r * 1103515245u + 12345u;
				qslot[k] = (int) ((r >> 16) % 3) - 1 < 0 ? -1 : 0 + (int) ((r >> 18) % 2);
				tslot[k] = (r >> 20) % 3 == 0 ? -1 : 2 + (int) ((r >> 22) % 2);
			}
			wfe_release_pick(&sc, 20, qslot, tslot, room, go);
			for (int k = 0; k < 20; k++)
				if (go[k])
				{
					if (qslot[k] >= 0)
						took[qslot[k]]++;
					if (tslot[k] >= 0)
						took[tslot[k]]++;
				}
			for (int j = 0; j < 4; j++)
				if (took[j] > before[j] || room[j] != before[j] - took[j])
					bad++;
		}
		ok(bad == 0, "no room is ever overrun (%d)", bad);
	}

	/*
	 * Decided one at a time (a release's candidates): a task its circuit or
	 * rate limit then holds gives its room back, and the next candidate of
	 * the same batch takes it.
	 */
	{
		wfe_release_scope scope = {true, 1, false, -1};
		int			room[2] = {0, 1};
		int			qslot[3] = {1, 1, 1};
		int			tslot[3] = {-1, -1, -1};
		bool		go[3];
		int			sent = -1;

		for (int k = 0; k < 3; k++)
		{
			if (wfe_release_pick(&scope, 1, &qslot[k], &tslot[k], room, &go[k]) == 0)
				continue;
			if (k == 0)
				room[qslot[k]]++;	/* the first is held by its rate limit */
			else if (sent < 0)
				sent = k;
		}
		ok(go[0] && go[1] && !go[2] && sent == 1 && room[1] == 0,
		   "a held task's room goes to the next candidate of the same batch (sent %d)", sent);
	}
	return tap_done();
}
