/*
 * concurrency.c — keyed concurrency's decisions (concurrency.h).
 */
#include "concurrency.h"

/* Room for more attempts of a key: max less those busy, never below 0. */
int
wfe_slots_room(int max, int busy)
{
	return max > busy ? max - busy : 0;
}

/* Decide n candidates in claim order (concurrency.h). */
int
wfe_slots_admit(int n, const int *slot, int *room, wfe_slot_verdict *verdict)
{
	int			go = 0;

	for (int k = 0; k < n; k++)
	{
		int			j = slot[k];

		if (j < 0)
			verdict[k] = WFE_SLOT_GO;
		else if (room[j] < 0)
			verdict[k] = WFE_SLOT_PASS;
		else if (room[j] > 0)
		{
			room[j]--;
			verdict[k] = WFE_SLOT_GO;
		}
		else
			verdict[k] = WFE_SLOT_HOLD;
		go += verdict[k] == WFE_SLOT_GO;
	}
	return go;
}
