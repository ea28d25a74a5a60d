/*
 * test_concurrency.c — unit tests of keyed concurrency's decisions
 * (src/core/flow/concurrency.c): the room a key has, and which of a
 * claim's candidates go, are held or pass.
 *
 * A standalone TAP program, built with ASan/UBSan by the Makefile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/flow/concurrency.h"

#include "tap.h"

int
main(void)
{
	ok(wfe_slots_room(3, 0) == 3, "an idle key of max 3 has room for 3");
	ok(wfe_slots_room(3, 2) == 1, "two busy of 3: room for 1");
	ok(wfe_slots_room(3, 3) == 0, "full: no room");
	ok(wfe_slots_room(1, 5) == 0, "over (a lowered max): no room, not negative");

	/* candidates in claim order: keys 0 and 1, and one without a key */
	{
		int			slot[6] = {0, 0, -1, 1, 0, 1};
		int			room[2] = {2, 1};
		wfe_slot_verdict v[6];
		int			go = wfe_slots_admit(6, slot, room, v);

		ok(go == 4, "four of six go (got %d)", go);
		ok(v[0] == WFE_SLOT_GO && v[1] == WFE_SLOT_GO, "key 0's first two take its two slots");
		ok(v[2] == WFE_SLOT_GO, "a candidate without a key always goes");
		ok(v[3] == WFE_SLOT_GO, "key 1's first takes its one slot");
		ok(v[4] == WFE_SLOT_HOLD, "key 0's third is held");
		ok(v[5] == WFE_SLOT_HOLD, "key 1's second is held");
		ok(room[0] == 0 && room[1] == 0, "the rooms are consumed");
	}
	/* a key whose lock was busy: its candidates pass, the others are decided */
	{
		int			slot[3] = {0, 1, 0};
		int			room[2] = {-1, 0};
		wfe_slot_verdict v[3];
		int			go = wfe_slots_admit(3, slot, room, v);

		ok(go == 0, "nothing goes (got %d)", go);
		ok(v[0] == WFE_SLOT_PASS && v[2] == WFE_SLOT_PASS, "a busy lock's candidates pass (left ready)");
		ok(v[1] == WFE_SLOT_HOLD, "a full key's candidate is held");
	}
	/* the invariant over many rounds: never more go than the room */
	{
		int			slot[100];
		wfe_slot_verdict v[100];
		int			bad = 0;

		for (int max = 1; max <= 7; max++)
			for (int busy = 0; busy <= 9; busy++)
			{
				int			room[3];
				int			go[3] = {0, 0, 0};

				for (int k = 0; k < 100; k++)
					slot[k] = (k * 7 + busy) % 4 - 1;	/* -1, 0, 1, 2 */
				for (int j = 0; j < 3; j++)
					room[j] = wfe_slots_room(max, busy + j);
				wfe_slots_admit(100, slot, room, v);
				for (int k = 0; k < 100; k++)
					if (slot[k] >= 0 && v[k] == WFE_SLOT_GO)
						go[slot[k]]++;
				for (int j = 0; j < 3; j++)
					if (go[j] != wfe_slots_room(max, busy + j))
						bad++;
			}
		ok(bad == 0, "with ample candidates, each key gets exactly its room (%d mismatches)", bad);
	}

	return tap_done();
}
