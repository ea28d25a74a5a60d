/*
 * report.h — turning a finished command into wfe.complete_task or
 * wfe.fail_task (or, for a cancelled one, wfe.ack_cancel).
 */
#ifndef WFE_WORKER_REPORT_H
#define WFE_WORKER_REPORT_H

#include "worker.h"

typedef enum ReportStatus
{
	REPORT_DONE,				/* reported, or not to be reported: free the slot */
	REPORT_RETRY				/* PostgreSQL is away: try again once reconnected */
} ReportStatus;

extern ReportStatus report_slot(Slot *s);

#endif							/* WFE_WORKER_REPORT_H */
