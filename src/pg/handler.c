/*
 * handler.c — in-database action handlers run as the role that registered
 * them, never as the extension's owner (delivery.md, "In-database actions").
 *
 * As pg_cron runs a job as its owner, wfe switches to the registrant with
 * SetUserIdAndSecContext and SECURITY_RESTRICTED_OPERATION (no SET ROLE, no
 * temporary objects, no changes of session state) for the call only.  The
 * rule for which functions may be handlers is checked in one place,
 * handler_problem(): at registration, and again before every call, since a
 * function's owner or schema can change after it was registered.
 *
 * Inside the call the handler is its registrant for wfe too: wfe asks who is
 * calling here (wfe_caller_role, wfe._caller(), wfe._identity()), never
 * GetOuterUserId() or session_user directly -- in the background worker
 * those are the bootstrap superuser, and a handler would read and act for
 * every tenant and approve its registrant's own versions.  So tenant
 * membership, queue grants, superuser and wfe_admin checks, the four-eyes
 * rule and the identities wfe records all see the registrant, and a handler
 * can do exactly what its registrant can.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "wfe.h"

/* Why fn may not run as role's handler, or NULL when it may. */
static char *
handler_problem(Oid fn, Oid role)
{
	HeapTuple	tup;
	Form_pg_proc proc;
	char	   *problem = NULL;

	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		return psprintf("the role (OID %u) that registered handler %u no longer exists", role, fn);
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		return psprintf("handler function %u no longer exists", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (isAnyTempNamespace(proc->pronamespace))
		problem = psprintf("handler %s lives in a temporary schema",
						   format_procedure(fn));
	else if (proc->proowner != role && !superuser_arg(proc->proowner))
		problem = psprintf("handler %s is owned by role \"%s\", not by its registrant \"%s\" or a superuser",
						   format_procedure(fn), GetUserNameFromId(proc->proowner, false),
						   GetUserNameFromId(role, false));
	else if (pg_proc_aclcheck(fn, role, ACL_EXECUTE) != ACLCHECK_OK)
		problem = psprintf("role \"%s\" may not execute handler %s",
						   GetUserNameFromId(role, false), format_procedure(fn));
	ReleaseSysCache(tup);
	return problem;
}

/* The registrant of the handler running now (innermost), or InvalidOid. */
static Oid	running_as = InvalidOid;

/* The role acting: a running handler's registrant, else the session's role (SET ROLE included). */
Oid
wfe_caller_role(void)
{
	return OidIsValid(running_as) ? running_as : GetOuterUserId();
}

/*
 * Make role the one acting (InvalidOid: the session's again) and return
 * the previous one, for the caller to restore: a schedule's tick submits
 * as the schedule's owner (schedule.c).
 */
Oid
wfe_set_acting_role(Oid role)
{
	Oid			previous = running_as;

	running_as = role;
	return previous;
}

PG_FUNCTION_INFO_V1(wfe_caller);
PG_FUNCTION_INFO_V1(wfe_identity);
PG_FUNCTION_INFO_V1(wfe_check_handler);
PG_FUNCTION_INFO_V1(wfe_invoke_handler);

/* wfe._caller() RETURNS regrole: the role acting (wfe_caller_role). */
Datum
wfe_caller(PG_FUNCTION_ARGS)
{
	PG_RETURN_OID(wfe_caller_role());
}

/*
 * wfe._identity() RETURNS name: who wfe records and the four-eyes rule
 * compares -- a running handler's registrant, else session_user (which SET
 * ROLE does not change; a handler cannot SET ROLE, being restricted).
 */
Datum
wfe_identity(PG_FUNCTION_ARGS)
{
	Oid			who = OidIsValid(running_as) ? running_as : GetSessionUserId();

	PG_RETURN_DATUM(DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(who, false))));
}

/* wfe._check_handler(handler, role): raise 42501 unless handler may run as role. */
Datum
wfe_check_handler(PG_FUNCTION_ARGS)
{
	char	   *problem = handler_problem(PG_GETARG_OID(0), PG_GETARG_OID(1));

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s", problem),
				 errhint("A handler runs as the role that registers it: register a function that role "
						 "(or a superuser) owns, in a permanent schema, and that it may execute.")));
	PG_RETURN_VOID();
}

/*
 * wfe._invoke_handler(handler, role, input) RETURNS jsonb: call the handler
 * as role.  An error leaves the caller's subtransaction, whose abort
 * restores the user id and security context; running_as is restored here
 * (a handler may run wfe.tick(), and so other handlers, inside it).
 */
Datum
wfe_invoke_handler(PG_FUNCTION_ARGS)
{
	Oid			fn = PG_GETARG_OID(0);
	Oid			role = PG_GETARG_OID(1);
	Oid			save_user;
	int			save_sec;
	Oid			save_running_as = running_as;
	FmgrInfo	flinfo;
	LOCAL_FCINFO(call, 1);
	Datum		result;

	DirectFunctionCall2(wfe_check_handler, ObjectIdGetDatum(fn), ObjectIdGetDatum(role));
	fmgr_info(fn, &flinfo);
	InitFunctionCallInfoData(*call, &flinfo, 1, InvalidOid, NULL, NULL);
	call->args[0].value = PG_GETARG_DATUM(2);
	call->args[0].isnull = false;

	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(role, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	running_as = role;
	PG_TRY();
	{
		result = FunctionCallInvoke(call);
	}
	PG_FINALLY();
	{
		running_as = save_running_as;
	}
	PG_END_TRY();
	SetUserIdAndSecContext(save_user, save_sec);

	if (call->isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}
