/*
 * tenants.c — which tenants a role acts for (docs/operations.md "Tenants"),
 * the one place of the rule: wfe.my_tenants(), wfe._tenant_ok() and the
 * submit's check (submit.c) all ask tenants_of().
 *
 * A role acts for every tenant when it is a superuser or has wfe_admin's
 * privileges, else for the tenants mapped (wfe.tenant_members) to a role
 * whose privileges it has.  The role asking is wfe_caller_role(): the
 * callers are SECURITY DEFINER functions, whose current user is the
 * extension's owner.  In C, not SQL or PL/pgSQL, so that a submit checks
 * its tenant with one prepared statement and no function call in between.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "spi_stmt.h"
#include "wfe.h"

PG_FUNCTION_INFO_V1(wfe_my_tenants);
PG_FUNCTION_INFO_V1(wfe_tenant_ok);

/*
 * The rule, for role $1: NULL when it acts for every tenant, else the
 * tenants it acts for, sorted -- only $2 among them when $2 is not NULL.
 */
static stmt q_tenants_of = STMT(
	"SELECT CASE"
	"       WHEN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = $1), false)"
	"            OR pg_catalog.pg_has_role($1, 'wfe_admin', 'USAGE') THEN NULL"
	"       ELSE (SELECT coalesce(pg_catalog.array_agg(DISTINCT m.tenant::text ORDER BY m.tenant::text), '{}')"
	"               FROM wfe.tenant_members AS m"
	"              WHERE ($2::text IS NULL OR m.tenant = $2) AND pg_catalog.pg_has_role($1, m.role, 'USAGE'))"
	"       END",
	2, OIDOID, TX);

/*
 * The tenants the role acting acts for, only tenant among them unless it is
 * NULL; NULL: every tenant.  The caller is connected to SPI; the array is
 * in the SPI memory.
 */
static ArrayType *
tenants_of(const char *tenant)
{
	Datum		v[2] = {ObjectIdGetDatum(wfe_caller_role()), tenant ? CStringGetTextDatum(tenant) : (Datum) 0};
	bool		isnull;
	Datum		tenants;

	stmt_run(&q_tenants_of, v, tenant ? NULL : " n");
	tenants = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : DatumGetArrayTypeP(tenants);
}

/* Does the role acting act for tenant?  The caller may be connected to SPI or not. */
bool
wfe_acts_for_tenant(const char *tenant)
{
	ArrayType  *tenants;
	bool		ok;

	if (tenant == NULL)
		return false;
	SPI_connect();
	tenants = tenants_of(tenant);
	ok = tenants == NULL || ArrayGetNItems(ARR_NDIM(tenants), ARR_DIMS(tenants)) > 0;
	SPI_finish();
	return ok;
}

/*
 * wfe.my_tenants() RETURNS text[]: the tenants the role acting acts for;
 * NULL when it acts for every tenant.
 */
Datum
wfe_my_tenants(PG_FUNCTION_ARGS)
{
	ArrayType  *tenants;
	Datum		result = (Datum) 0;

	SPI_connect();
	tenants = tenants_of(NULL);
	if (tenants != NULL)
		result = SPI_datumTransfer(PointerGetDatum(tenants), false, -1);
	SPI_finish();
	if (tenants == NULL)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* wfe._tenant_ok(tenant text) RETURNS boolean: does the role acting act for tenant?  (NULL: false.) */
Datum
wfe_tenant_ok(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(!PG_ARGISNULL(0) && wfe_acts_for_tenant(text_to_cstring(PG_GETARG_TEXT_PP(0))));
}
