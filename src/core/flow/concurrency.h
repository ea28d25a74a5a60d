/*
 * concurrency.h — keyed concurrency (dsl.md "Flow-control keys",
 * operations.md "Flow control"): what may run now, pure C, no PostgreSQL
 * headers.
 *
 * A stage with `concurrency: {key, max}` binds its key when it is
 * released; at most max attempts of its queue and tenant sharing that key
 * value are running at once.  The claim is the gate: the server layer
 * (src/pg/concurrency.c) locks each key the claim's candidates name,
 * counts its attempts in flight, and asks wfe_slots_admit which candidates
 * go, which are held (queued, out of the ready index) and which pass (left
 * ready for the next claim: their key's lock was busy).  When an attempt
 * ends, wfe_slots_room says how many held attempts of its key to make
 * ready again.  Over-releasing is harmless (the claim decides again);
 * under-releasing would strand work, which is why a release that cannot
 * take the key's lock hands the key to the background worker.
 */
#ifndef WFE_CONCURRENCY_H
#define WFE_CONCURRENCY_H

/* The largest concurrency.max a definition may ask for. */
#define WFE_CONCURRENCY_MAX 100000

/*
 * A bound key longer than this many bytes is kept as its SHA-256 digest
 * ("sha256:" and 64 hex digits), so a key taken from a run's input costs
 * the same to store, index and compare whatever its size.
 */
#define WFE_CONCURRENCY_KEY_BYTES 128

/* What the claim does with one candidate. */
typedef enum wfe_slot_verdict
{
	WFE_SLOT_GO,				/* claim it: its key had room (or it has no key) */
	WFE_SLOT_HOLD,				/* its key is full: held until an attempt of the key ends */
	WFE_SLOT_PASS				/* its key's lock was busy: left ready, untouched */
} wfe_slot_verdict;

/* Room for more attempts of a key: max less those busy, never below 0. */
extern int	wfe_slots_room(int max, int busy);

/*
 * Decide n candidates in claim order.  slot[k]: the index of candidate k's
 * key among the keys, or -1 (no key: it goes).  room[j]: key j's room, or
 * -1 when its lock could not be taken (its candidates pass); consumed as
 * candidates take it.  Fills verdict[k]; returns how many go.
 */
extern int	wfe_slots_admit(int n, const int *slot, int *room, wfe_slot_verdict *verdict);

#endif							/* WFE_CONCURRENCY_H */
