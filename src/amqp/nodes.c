/*
 * nodes.c — the list of RabbitMQ nodes in an AMQP URI setting.  See nodes.h.
 */
#include "nodes.h"

#include <stdio.h>
#include <string.h>

/* See nodes.h. */
int
wfe_amqp_node_count(const char *uris)
{
	int			n = 1;

	for (const char *p = uris; *p; p++)
		if (*p == ',')
			n++;
	return n;
}

/* See nodes.h. */
bool
wfe_amqp_node_uri(const char *uris, int i, char *buf, size_t size)
{
	const char *start = uris,
			   *end;
	size_t		len;

	for (; i > 0; i--)
	{
		start = strchr(start, ',');
		if (start == NULL)
			return false;
		start++;
	}
	end = strchr(start, ',');
	if (end == NULL)
		end = start + strlen(start);
	while (start < end && (*start == ' ' || *start == '\t' || *start == '\n'))
		start++;
	while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n'))
		end--;
	len = (size_t) (end - start);
	if (len >= size)
		return false;
	memcpy(buf, start, len);
	buf[len] = '\0';
	return true;
}

/* See nodes.h. */
void
wfe_amqp_node_address(const char *uri, char *buf, size_t size)
{
	const char *host = strstr(uri, "://"),
			   *at,
			   *end;

	host = host ? host + 3 : uri;
	end = host + strcspn(host, "/?#");
	/* the credentials end at the authority's last '@' */
	for (at = end; at > host && at[-1] != '@'; at--)
		;
	snprintf(buf, size, "%.*s", (int) (end - at), at);
}
